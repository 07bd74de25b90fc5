//! How sources (the file's top level, a profile table, the environment, the flags) stack: a
//! higher layer wins wherever it sets a value. Each table's layer is declared with its keys in
//! `config::keys`.

/// A value and the key, variable or flag that set it, for checks that run after the layers are
/// merged (a duration's bounds depend on the merged `api_base`).
#[derive(Debug, Clone)]
pub struct Sourced<T> {
    pub value: T,
    pub key: String,
}

/// Declares a layer: a struct whose every field is optional, so a layer overrides only what it
/// names, and its `over`, where `self` wins wherever it sets a value. The fields under `merged`
/// are layers themselves, stacked key by key when both sources set them.
macro_rules! layer {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$doc:meta])* $field:ident: $ty:ty, )*
        }
        $( merged { $( $(#[$mdoc:meta])* $merged:ident: $mty:ty, )* } )?
    ) => {
        $(#[$meta])*
        #[derive(Default)]
        pub struct $name {
            $( $(#[$doc])* pub $field: Option<$ty>, )*
            $( $( $(#[$mdoc])* pub $merged: Option<$mty>, )* )?
        }

        impl $name {
            /// `self` wins wherever it sets a value.
            pub fn over(self, base: $name) -> $name {
                $name {
                    $( $field: self.$field.or(base.$field), )*
                    $( $( $merged: match (self.$merged, base.$merged) {
                        (Some(top), Some(low)) => Some(top.over(low)),
                        (top, low) => top.or(low),
                    }, )* )?
                }
            }
        }
    };
}
pub(super) use layer;
