//! What one source (the file's top level, a profile table, the environment, the flags) sets, and
//! how sources stack: a higher layer wins wherever it sets a value.

use super::LogFormat;
use secrecy::SecretString;
use std::path::PathBuf;

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

layer! {
    /// What one source sets, every field optional. Deliberately not `Debug`: it may hold the key.
    pub struct Layer {
        api_base: String,
        api_key_file: PathBuf,
        api_key: SecretString,
        /// `allow_cleartext`: an `http://` `api_base` beyond loopback is allowed.
        allow_cleartext: bool,
        log_level: String,
        log_format: LogFormat,
    }
    merged {
        /// `[listen]`'s plain keys (`config::keys`).
        listen: super::keys::ListenLayer,
        /// `[listen.claude]` and `[listen.codex]`.
        claude: super::keys::ClaudeLayer,
        codex: super::keys::CodexLayer,
        /// `[listen.policy]`, key by key: a profile's table over the top level's.
        policy: crate::core::policy::PolicyLayer,
    }
}
