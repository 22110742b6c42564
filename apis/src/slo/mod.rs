//! The `slo.koordinator.sh` API group: NodeSLO and NodeMetric.

pub mod v1alpha1;

/// Declares a string-valued enum the way Go declares `type X string` constants.
///
/// Go accepts any string for such a type, so a value this version does not know
/// is kept in `Unknown` (and written back verbatim) instead of failing the whole
/// object; `validate()` functions report it. The schema is `type: string`, plus
/// the list of known values when `closed` is given (upstream's
/// `+kubebuilder:validation:Enum`).
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $(@$closed:ident)? pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $value:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know, kept verbatim.
            Unknown(String),
        }

        impl $name {
            /// Every value upstream defines, in declaration order.
            pub const KNOWN_VALUES: &'static [&'static str] = &[$($value),+];

            /// The wire value.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $value, )+
                    Self::Unknown(other) => other.as_str(),
                }
            }

            /// False for a value upstream does not define.
            pub fn is_known(&self) -> bool {
                !matches!(self, Self::Unknown(_))
            }
        }

        impl $crate::slo::StringEnum for $name {
            const KNOWN_VALUES: &'static [&'static str] = $name::KNOWN_VALUES;

            fn as_str(&self) -> &str {
                $name::as_str(self)
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                match value {
                    $( $value => Self::$variant, )+
                    other => Self::Unknown(other.to_owned()),
                }
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                Self::from(value.as_str())
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                value.as_str().to_owned()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = <String as serde::Deserialize>::deserialize(deserializer)?;
                Ok(Self::from(value))
            }
        }

        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                let closed: &[&str] = &[$(stringify!($closed))?];
                if closed.is_empty() {
                    schemars::json_schema!({ "type": "string" })
                } else {
                    schemars::json_schema!({ "type": "string", "enum": Self::KNOWN_VALUES })
                }
            }
        }
    };
}

pub(crate) use string_enum;

/// What every enum declared with `string_enum!` offers, for code that checks
/// values generically (e.g. configuration validation).
pub trait StringEnum {
    /// Every value upstream defines.
    const KNOWN_VALUES: &'static [&'static str];

    /// The wire value.
    fn as_str(&self) -> &str;

    /// False for a value upstream does not define.
    fn is_known(&self) -> bool {
        Self::KNOWN_VALUES.contains(&self.as_str())
    }
}
