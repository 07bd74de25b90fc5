//! The launchd agent: its label and its plist (launchd cannot run on Linux; the tests read the
//! plist back with a real plist parser).

use super::UnitSpec;
use crate::config::LAUNCHD_LABEL_PREFIX;

const LAUNCHD_TEMPLATE: &str = include_str!("../../launchd/me.agentchat.listen.plist");

/// `me.agentchat.listen`, or `me.agentchat.listen.<profile>` (see [`LAUNCHD_LABEL_PREFIX`]).
pub fn launchd_label(profile: &str) -> String {
    if profile == "default" {
        LAUNCHD_LABEL_PREFIX.into()
    } else {
        format!("{LAUNCHD_LABEL_PREFIX}.{profile}")
    }
}

pub(super) fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The plist's text for `spec`.
pub(super) fn render(spec: &UnitSpec) -> String {
    let args: Vec<String> = spec
        .listen_args()
        .iter()
        .map(|a| format!("    <string>{}</string>", xml_escape(a)))
        .collect();
    LAUNCHD_TEMPLATE
        .replace("{{PROFILE}}", &xml_escape(&spec.profile))
        .replace("{{LABEL}}", &xml_escape(&launchd_label(&spec.profile)))
        .replace("{{PROGRAM_ARGUMENTS}}", &args.join("\n"))
        .replace(
            "{{ENVIRONMENT}}",
            &spec
                .environment()
                .iter()
                .map(|(k, v)| {
                    format!(
                        "    <key>{}</key>\n    <string>{}</string>",
                        xml_escape(k),
                        xml_escape(v)
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"),
        )
        .replace("{{EXIT_TIMEOUT}}", &spec.stop_timeout_secs().to_string())
        .replace(
            "{{LOG_PATH}}",
            &xml_escape(&spec.log_path.display().to_string()),
        )
}
