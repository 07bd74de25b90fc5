//! The memory a run can have (issue 27; docs/many-agents.md, "How many runs at once"): with
//! `listen --all` and `listen.min_available_memory`, the process's run slots
//! (`core::host`) hold runs back while less is available; this reads what is, when the machine
//! asks (`core::host::HostEffect::ReadMemory`). What "available" means is `core::admission`.

use crate::core::admission::{self, CgroupMemory};
use std::io::Read as _;

/// The most read of a `/proc` or cgroup file (`/proc/meminfo` is under 2 KiB).
const FILE_CAP: u64 = 16 * 1024;

/// The memory a run can have now (`core::admission::available`): `MemAvailable`, and the
/// headroom of every cgroup of this process that has a memory limit.
pub fn available_memory() -> Option<u64> {
    let meminfo = read_small("/proc/meminfo").and_then(|t| admission::parse_meminfo(&t));
    let cgroups: Vec<CgroupMemory> = read_small("/proc/self/cgroup")
        .map(|t| admission::cgroup_paths(&t))
        .unwrap_or_default()
        .iter()
        .filter_map(|p| {
            let dir = format!("/sys/fs/cgroup{p}");
            let limit = admission::parse_memory_max(&read_small(&format!("{dir}/memory.max"))?)?;
            let usage = read_small(&format!("{dir}/memory.current"))?
                .trim()
                .parse()
                .ok()?;
            Some(CgroupMemory { limit, usage })
        })
        .collect();
    admission::available(meminfo, &cgroups)
}

fn read_small(path: &str) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(FILE_CAP)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machines_memory_can_be_read() {
        // Linux always has MemAvailable; the cgroup part depends on where the tests run.
        if std::path::Path::new("/proc/meminfo").exists() {
            assert!(available_memory().is_some_and(|b| b > 0));
        }
    }
}
