//! Enumerated configuration values, each spelling written once.
//!
//! [`config_enum!`] declares an enum with the spelling of each variant. From that one
//! list come its `clap::ValueEnum` (so a command-line flag takes the same values), its
//! serde form (so a file does), `NAMES` for the schema's "is not one of" messages, and
//! `as_str` for logs and labels.

/// Declares a configuration enum: `Variant = "spelling"` for each variant.
///
/// The enum gets `NAMES` (every spelling, in order), `ALL`, `as_str`, `from_name`,
/// `Display`, `clap::ValueEnum`, and serde as its spelling. An unknown spelling is refused
/// by serde with the same message a derived enum gives (`unknown variant …, expected one
/// of …`).
macro_rules! config_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident = $spelling:literal
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $(
                $(#[$vmeta])*
                $variant,
            )+
        }

        impl $name {
            /// Every spelling, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($spelling),+];
            /// Every variant, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The spelling in the configuration.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $spelling,)+
                }
            }

            /// The variant spelled `name` (exactly), if any.
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($spelling => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl ::clap::ValueEnum for $name {
            fn value_variants<'a>() -> &'a [Self] {
                Self::ALL
            }

            fn to_possible_value(&self) -> Option<::clap::builder::PossibleValue> {
                Some(::clap::builder::PossibleValue::new(self.as_str()))
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_enum(
                    stringify!($name),
                    Self::NAMES,
                    $crate::config::enums::Spelling::<Self>::new(
                        stringify!($name),
                        Self::NAMES,
                        Self::from_name,
                    ),
                )
            }
        }
    };
}

pub(crate) use config_enum;

/// The serde visitor of a [`config_enum!`] enum. It reads the value as serde's derive
/// reads a unit-only enum (`deserialize_enum`, then the variant's name), so a wrong value
/// is refused with the same message as before: `unknown variant …, expected one of …`.
pub struct Spelling<T> {
    name: &'static str,
    names: &'static [&'static str],
    parse: fn(&str) -> Option<T>,
}

impl<T> Spelling<T> {
    /// A visitor for the enum `name` accepting `names`, read by `parse`.
    pub fn new(
        name: &'static str,
        names: &'static [&'static str],
        parse: fn(&str) -> Option<T>,
    ) -> Self {
        Self { name, names, parse }
    }
}

impl<'de, T> serde::de::Visitor<'de> for Spelling<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "enum {}", self.name)
    }

    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<T, A::Error> {
        use serde::de::VariantAccess as _;
        let (value, variant) = data.variant_seed(Identifier(self))?;
        variant.unit_variant()?;
        Ok(value)
    }
}

/// The variant's name, read as an identifier.
struct Identifier<T>(Spelling<T>);

impl<'de, T> serde::de::DeserializeSeed<'de> for Identifier<T> {
    type Value = T;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de, T> serde::de::Visitor<'de> for Identifier<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("variant identifier")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        (self.0.parse)(v).ok_or_else(|| E::unknown_variant(v, self.0.names))
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum as _;

    config_enum! {
        /// A test enum.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Fruit {
            /// An apple.
            Apple = "apple",
            /// A pear with an odd spelling.
            Pear = "the/pear",
        }
    }

    #[derive(Debug, serde::Deserialize, serde::Serialize, PartialEq)]
    struct Basket {
        fruit: Fruit,
    }

    #[test]
    fn one_spelling_serves_clap_serde_and_the_schema() {
        assert_eq!(Fruit::NAMES, &["apple", "the/pear"]);
        assert_eq!(Fruit::from_str("the/pear", false), Ok(Fruit::Pear));
        assert_eq!(Fruit::Pear.to_string(), "the/pear");
        let b: Basket = toml::from_str("fruit = \"the/pear\"").unwrap();
        assert_eq!(b.fruit, Fruit::Pear);
        assert_eq!(toml::to_string(&b).unwrap().trim(), "fruit = \"the/pear\"");
        let e = toml::from_str::<Basket>("fruit = \"plum\"").unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown variant `plum`, expected `apple` or `the/pear`"),
            "{e}"
        );
    }
}
