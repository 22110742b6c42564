//! `wire_enum!`: string-valued enums as upstream declares them (a Go
//! `type X string` with a set of constants), shared by every API group.
//!
//! Each enum encodes as its plain string and gets `as_str`, `Display`,
//! `FromStr`, `KNOWN_VALUES` (declaration order), `From<X> for String` and
//! [`WireEnum`]. The flavour says what happens to a value this version does
//! not define:
//! - `open`: Go accepts any string, so objects written by newer or foreign
//!   components may carry one. It decodes into `Other(String)` and re-encodes
//!   verbatim, so one unexpected value never fails a whole object (or a
//!   list/watch); `validate()` functions report it. Schema: `type: string`.
//! - `open listed`: decodes like `open`, but the schema lists the known
//!   values because upstream's CRD does (`+kubebuilder:validation:Enum`).
//! - `closed`: decoding an unknown value is an
//!   [`UnknownValueError`](crate::extension::UnknownValueError); used where
//!   the API server already rejects other values, and inside annotations,
//!   where a value we do not understand must not silently change behaviour.
//!   The enum is `Copy`, `as_str` is a `const fn` returning `&'static str`,
//!   `ALL` lists the variants, and the schema lists the values.
//!
//! ```ignore
//! wire_enum! {
//!     /// Doc.
//!     pub enum Phase open {
//!         /// Doc.
//!         Pending = "Pending",
//!     }
//! }
//! ```

/// What every `wire_enum!` enum offers, for code that checks values
/// generically (e.g. configuration validation).
pub trait WireEnum {
    /// Every value this version defines, in declaration order.
    const KNOWN_VALUES: &'static [&'static str];

    /// The wire value.
    fn as_str(&self) -> &str;

    /// False for a value this version does not define (only `open` enums
    /// can hold one).
    fn is_known(&self) -> bool {
        Self::KNOWN_VALUES.contains(&self.as_str())
    }
}

/// Declares a wire string enum; see the module docs for the flavours.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident open {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal ),+ $(,)?
        }
    ) => {
        $crate::wire_enum::wire_enum! {
            @open [$(#[$meta])*] $vis $name
            [$( [$(#[$vmeta])*] $variant $value )+]
            ::schemars::json_schema!({ "type": "string" })
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident open listed {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal ),+ $(,)?
        }
    ) => {
        $crate::wire_enum::wire_enum! {
            @open [$(#[$meta])*] $vis $name
            [$( [$(#[$vmeta])*] $variant $value )+]
            ::schemars::json_schema!({ "type": "string", "enum": [$($value),+] })
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident closed {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every accepted value, in declaration order (the schema's `enum`).
            pub const KNOWN_VALUES: &'static [&'static str] = &[$($value),+];

            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$(Self::$variant),+];

            /// The wire value.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $value, )+
                }
            }
        }

        impl $crate::wire_enum::WireEnum for $name {
            const KNOWN_VALUES: &'static [&'static str] = $name::KNOWN_VALUES;

            fn as_str(&self) -> &str {
                $name::as_str(*self)
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::extension::UnknownValueError;

            fn from_str(value: &str) -> ::std::result::Result<Self, Self::Err> {
                match value {
                    $( $value => Ok(Self::$variant), )+
                    other => Err($crate::extension::UnknownValueError {
                        kind: stringify!($name),
                        value: other.to_owned(),
                        allowed: Self::KNOWN_VALUES,
                    }),
                }
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<Self, D::Error> {
                let value =
                    <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(deserializer)?;
                value.parse().map_err(<D::Error as ::serde::de::Error>::custom)
            }
        }

        $crate::wire_enum::wire_enum! {
            @common $name
            ::schemars::json_schema!({ "type": "string", "enum": [$($value),+] })
        }
    };
    (
        @open [$(#[$meta:meta])*] $vis:vis $name:ident
        [$( [$(#[$vmeta:meta])*] $variant:ident $value:literal )+]
        $schema:expr
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know, kept verbatim.
            Other(::std::string::String),
        }

        impl $name {
            /// Every value this version knows, in declaration order.
            pub const KNOWN_VALUES: &'static [&'static str] = &[$($value),+];

            /// The wire value.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $value, )+
                    Self::Other(value) => value.as_str(),
                }
            }

            /// False for a value this version does not define.
            pub fn is_known(&self) -> bool {
                !matches!(self, Self::Other(_))
            }
        }

        impl $crate::wire_enum::WireEnum for $name {
            const KNOWN_VALUES: &'static [&'static str] = $name::KNOWN_VALUES;

            fn as_str(&self) -> &str {
                $name::as_str(self)
            }

            fn is_known(&self) -> bool {
                $name::is_known(self)
            }
        }

        impl ::std::convert::From<&str> for $name {
            fn from(value: &str) -> Self {
                match value {
                    $( $value => Self::$variant, )+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl ::std::convert::From<::std::string::String> for $name {
            fn from(value: ::std::string::String) -> Self {
                match value.as_str() {
                    $( $value => Self::$variant, )+
                    _ => Self::Other(value),
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = ::std::convert::Infallible;

            fn from_str(value: &str) -> ::std::result::Result<Self, Self::Err> {
                Ok(Self::from(value))
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<Self, D::Error> {
                let value =
                    <::std::string::String as ::serde::Deserialize>::deserialize(deserializer)?;
                Ok(Self::from(value))
            }
        }

        $crate::wire_enum::wire_enum! { @common $name $schema }
    };
    (@common $name:ident $schema:expr) => {
        impl ::std::convert::From<$name> for ::std::string::String {
            fn from(value: $name) -> Self {
                value.as_str().to_owned()
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl ::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed(stringify!($name))
            }

            fn inline_schema() -> bool {
                true
            }

            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                $schema
            }
        }
    };
}

pub(crate) use wire_enum;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::WireEnum;
    use crate::extension::UnknownValueError;

    wire_enum! {
        /// Test enum: any value decodes.
        pub enum Lenient open {
            First = "first",
            Second = "Second",
        }
    }

    wire_enum! {
        /// Test enum: any value decodes, the schema lists the known ones.
        pub enum LenientListed open listed {
            Only = "only",
        }
    }

    wire_enum! {
        /// Test enum: unknown values are errors.
        pub enum Strict closed {
            Yes = "yes",
            No = "No",
        }
    }

    fn schema_of<T: schemars::JsonSchema>() -> serde_json::Value {
        serde_json::to_value(schemars::SchemaGenerator::default().subschema_for::<T>()).unwrap()
    }

    #[test]
    fn open_enums_keep_unknown_values_verbatim() {
        let decoded: Vec<Lenient> = serde_json::from_str(r#"["first","Second","third"]"#).unwrap();
        assert_eq!(
            decoded,
            [
                Lenient::First,
                Lenient::Second,
                Lenient::Other("third".to_owned())
            ]
        );
        assert_eq!(
            serde_json::to_string(&decoded).unwrap(),
            r#"["first","Second","third"]"#
        );
        assert!(decoded[0].is_known());
        assert!(!decoded[2].is_known());
        assert!(!WireEnum::is_known(&decoded[2]));
        assert_eq!(
            "third".parse::<Lenient>(),
            Ok(Lenient::Other("third".into()))
        );
        assert_eq!(Lenient::from(String::from("first")), Lenient::First);
        assert_eq!(String::from(Lenient::Other("x".into())), "x");
        assert_eq!(Lenient::Second.to_string(), "Second");
        assert_eq!(Lenient::KNOWN_VALUES, ["first", "Second"]);
        // Matching is exact, as in Go.
        assert_eq!(Lenient::from("second"), Lenient::Other("second".into()));
    }

    #[test]
    fn closed_enums_reject_unknown_values_with_a_typed_error() {
        assert_eq!("No".parse::<Strict>(), Ok(Strict::No));
        assert_eq!(
            "maybe".parse::<Strict>(),
            Err(UnknownValueError {
                kind: "Strict",
                value: "maybe".into(),
                allowed: &["yes", "No"],
            })
        );
        let error = serde_json::from_str::<Strict>(r#""no""#).unwrap_err();
        assert!(error.to_string().contains("\"no\""), "{error}");
        assert_eq!(
            serde_json::from_str::<Strict>(r#""yes""#).unwrap(),
            Strict::Yes
        );
        assert_eq!(serde_json::to_string(&Strict::No).unwrap(), r#""No""#);
        assert_eq!(Strict::ALL, [Strict::Yes, Strict::No]);
        assert_eq!(Strict::KNOWN_VALUES, ["yes", "No"]);
        assert_eq!(<Strict as WireEnum>::as_str(&Strict::Yes), "yes");
        assert!(WireEnum::is_known(&Strict::No));
        assert_eq!(String::from(Strict::Yes), "yes");
        const NAME: &str = Strict::No.as_str();
        assert_eq!(NAME, "No");
    }

    #[test]
    fn schemas_are_inline_strings_listing_values_unless_open() {
        assert_eq!(
            schema_of::<Lenient>(),
            serde_json::json!({"type": "string"})
        );
        assert_eq!(
            schema_of::<LenientListed>(),
            serde_json::json!({"type": "string", "enum": ["only"]})
        );
        assert_eq!(
            schema_of::<Strict>(),
            serde_json::json!({"type": "string", "enum": ["yes", "No"]})
        );
        assert_eq!(
            serde_json::from_str::<LenientListed>(r#""other""#).unwrap(),
            LenientListed::Other("other".into())
        );
    }
}
