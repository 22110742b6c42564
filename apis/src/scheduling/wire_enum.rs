//! `wire_enum!`: string-valued enums as upstream declares them (a Go `string` type with a
//! set of constants), shared by the scheduling, scheduling-sigs, quota,
//! config and topology API groups.
//!
//! Two flavours, chosen by what the upstream CRD schema allows:
//! - `open`: the schema is a plain `string`, so objects written by newer or
//!   foreign components may carry values we do not know. Those decode into an
//!   `Other(String)` variant and re-encode verbatim, so one unexpected phase
//!   never makes a whole list/watch fail.
//! - `closed`: the schema carries an `enum`, so the API server rejects any
//!   other value; decoding an unknown value is an error.

use std::fmt;

/// Writes a string value (used by the generated `Display` impls).
pub(crate) fn write_str(f: &mut fmt::Formatter<'_>, value: &str) -> fmt::Result {
    f.write_str(value)
}

/// Declares a wire string enum; see the module docs for `open` vs `closed`.
///
/// ```ignore
/// wire_enum! {
///     /// Doc.
///     pub enum Phase open {
///         /// Doc.
///         Pending = "Pending",
///     }
/// }
/// ```
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident open {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal ),+ $(,)?
        }
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

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                $crate::scheduling::wire_enum::write_str(f, self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, ser: S) -> ::std::result::Result<S::Ok, S::Error> {
                ser.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(de: D) -> ::std::result::Result<Self, D::Error> {
                let value = <::std::string::String as ::serde::Deserialize>::deserialize(de)?;
                Ok(Self::from(value))
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
                ::schemars::json_schema!({ "type": "string" })
            }
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
            pub const VALUES: &'static [&'static str] = &[$($value),+];

            /// The wire value.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $value, )+
                }
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
                        allowed: Self::VALUES,
                    }),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                $crate::scheduling::wire_enum::write_str(f, self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, ser: S) -> ::std::result::Result<S::Ok, S::Error> {
                ser.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(de: D) -> ::std::result::Result<Self, D::Error> {
                let value = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(de)?;
                value.parse().map_err(<D::Error as ::serde::de::Error>::custom)
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
                ::schemars::json_schema!({ "type": "string", "enum": [$($value),+] })
            }
        }
    };
}

pub(crate) use wire_enum;
