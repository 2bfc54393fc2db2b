//! The cost per multiply-add against the working set (profile version 3's
//! `c_muladd_by_working_set`, [`iterstore_perf::spec::CachePoint`]): the fully connected layer's
//! GEMMs timed at working sets around this machine's cache sizes.
//!
//! The cache sizes come from Linux's sysfs (`/sys/devices/system/cpu/cpu0/cache/index*/`:
//! `level`, `type`, `size`; data and unified caches), as hwloc reads them. Around each
//! level of size `S` the layer is timed at `S / 2` (fits) and `2 S` (does not), and once
//! more at `4 S` past the last level (memory), up to [`Settings::cache_cap_bytes`] (4 MiB
//! with `--quick`). Where
//! sysfs cannot be read the sizes are a fixed grid (16 KiB to 64 MiB by factors of 4)
//! and [`CacheCurve::sizes_from`] says so.
//!
//! A point's working set is what the model counts for one thread of a fully connected
//! segment (`Model::working_set`): an `n × n` layer's weights plus one sample's `n` inputs
//! and `n` outputs, 4 bytes each; its factor is the GEMMs' seconds per multiply-add (the
//! forward, back-propagation and update GEMMs over a batch that `C_muladd` times, without
//! the element-wise passes) over those
//! of `C_muladd`'s layer, the two timed alternately, each the fastest of its repetitions
//! (on a shared machine the load moves single figures up to 2x, and only ever up). The batch's activations (`batch / n` of the weights) are not
//! counted. At small sizes the factor also holds the GEMM's fixed costs per call, which a
//! small segment pays too.

use std::path::Path;

use iterstore_perf::spec::CachePoint;

use std::time::Duration;

use super::{Layer, Settings};

/// One cache level as the machine reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLevel {
    /// 1, 2, 3, ...
    pub level: u32,
    /// Bytes.
    pub bytes: u64,
}

/// The measured curve and what its sizes came from.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheCurve {
    /// The points, by increasing bytes (the profile's `c_muladd_by_working_set`).
    pub points: Vec<CachePoint>,
    /// The cache levels the sizes were chosen around (empty with the fixed grid).
    pub levels: Vec<CacheLevel>,
    /// Where the sizes came from: `sysfs` or why the fixed grid was used.
    pub sizes_from: String,
}

/// Parses a sysfs cache size (`32K`, `1024K`, `32M`, or bytes).
fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, unit) = match t.as_bytes().last()? {
        b'K' | b'k' => (&t[..t.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&t[..t.len() - 1], 1 << 20),
        b'G' | b'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// The data and unified caches under `dir` (a sysfs `cache` directory), one per level
/// (the largest if a level is listed twice), by level; an error names what is missing.
pub fn cache_levels(dir: &Path) -> Result<Vec<CacheLevel>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut levels: Vec<CacheLevel> = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let read = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
        if read("type").trim() == "Instruction" {
            continue;
        }
        let (Ok(level), Some(bytes)) = (
            read("level").trim().parse::<u32>(),
            parse_size(&read("size")),
        ) else {
            continue;
        };
        match levels.iter_mut().find(|c| c.level == level) {
            Some(c) => c.bytes = c.bytes.max(bytes),
            None => levels.push(CacheLevel { level, bytes }),
        }
    }
    levels.sort_by_key(|c| c.level);
    if levels.is_empty() {
        return Err(format!("{} lists no data cache", dir.display()));
    }
    Ok(levels)
}

/// The working sets to time: `S / 2` and `2 S` around each level, `4 S` past the last,
/// none above `cap` bytes; without levels, 16 KiB to 64 MiB by factors of 4.
pub fn working_sets(levels: &[CacheLevel], cap: u64) -> Vec<u64> {
    let mut sizes: Vec<u64> = if levels.is_empty() {
        (0..6).map(|i| (16u64 << 10) << (2 * i)).collect()
    } else {
        let mut v: Vec<u64> = levels
            .iter()
            .flat_map(|c| [c.bytes / 2, c.bytes * 2])
            .collect();
        v.extend(levels.last().map(|c| c.bytes * 4));
        v
    };
    sizes.retain(|&b| b <= cap);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// The side `n` of the square layer whose working set (`n² + 2n` values of 4 bytes) is
/// nearest `bytes` from below, at least 8.
fn side(bytes: u64) -> usize {
    let values = bytes as f64 / 4.0;
    ((-1.0 + (1.0 + values).sqrt()).floor() as usize).max(8)
}

/// The working set in bytes the model counts for an `n × n` layer on one thread.
fn bytes_of(n: usize) -> f64 {
    4.0 * (n * n + 2 * n) as f64
}

/// The layer's GEMM seconds per multiply-add at side `n` over those at side `reference`
/// (the `C_muladd` layer): each the fastest of `s.repeats` steps, the two alternating, so
/// that both see the same spells of the machine's load and a step slowed by another
/// process (the noise on a shared machine only adds time) is not the one kept.
fn relative_cost(s: &Settings, n: usize, reference: usize) -> f64 {
    let mut layer = Layer::new(n, s.batch);
    let mut base = Layer::new(reference, s.batch);
    layer.gemms(n, s.batch);
    base.gemms(reference, s.batch);
    let (mut t, mut r) = (Duration::MAX, Duration::MAX);
    for _ in 0..s.repeats.max(1) {
        r = r.min(base.gemms(reference, s.batch));
        t = t.min(layer.gemms(n, s.batch));
    }
    let per_muladd =
        |d: Duration, side: usize| d.as_secs_f64() / (3.0 * (s.batch * side * side) as f64);
    per_muladd(t, n) / per_muladd(r, reference).max(1e-15)
}

/// The curve of this machine: the layer timed at [`working_sets`] around `levels` (up
/// to `cap` bytes), each point's factor its cost over the `C_muladd` layer's
/// ([`Settings::size`]) timed beside it.
pub fn measure(s: &Settings, levels: &[CacheLevel], cap: u64) -> Vec<CachePoint> {
    let mut points: Vec<CachePoint> = Vec::new();
    for target in working_sets(levels, cap) {
        let n = side(target);
        let bytes = bytes_of(n);
        if points.last().is_some_and(|p| p.bytes >= bytes) {
            continue;
        }
        let factor = relative_cost(s, n, s.size).max(1e-3);
        points.push(CachePoint { bytes, factor });
    }
    points
}

/// Measures the curve around this machine's caches (sysfs), or on the fixed grid where
/// sysfs cannot be read, up to [`Settings::cache_cap_bytes`].
pub fn cache_curve(s: &Settings) -> CacheCurve {
    let (levels, sizes_from) = match cache_levels(Path::new("/sys/devices/system/cpu/cpu0/cache")) {
        Ok(levels) => (levels, "sysfs".to_string()),
        Err(why) => (Vec::new(), format!("a fixed grid ({why})")),
    };
    CacheCurve {
        points: measure(s, &levels, s.cache_cap_bytes),
        levels,
        sizes_from,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory.
    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("iterstore-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn sysfs_sizes_parse() {
        assert_eq!(parse_size("32K\n"), Some(32 << 10));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn cache_levels_read_data_and_unified_caches() {
        let dir = scratch("levels");
        for (i, (level, kind, size)) in [
            (1, "Data", "32K"),
            (1, "Instruction", "64K"),
            (2, "Unified", "1024K"),
            (3, "Unified", "32768K"),
        ]
        .iter()
        .enumerate()
        {
            let d = dir.as_path().join(format!("index{i}"));
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("level"), format!("{level}\n")).unwrap();
            std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
            std::fs::write(d.join("size"), format!("{size}\n")).unwrap();
        }
        let levels = cache_levels(dir.as_path()).unwrap();
        let sizes: Vec<u64> = levels.iter().map(|c| c.bytes).collect();
        assert_eq!(sizes, [32 << 10, 1 << 20, 32 << 20]);
        // Below and above each level, and four times the last.
        assert_eq!(
            working_sets(&levels, u64::MAX),
            [
                16 << 10,
                64 << 10,
                512 << 10,
                2 << 20,
                16 << 20,
                64 << 20,
                128 << 20
            ]
        );
        assert_eq!(
            working_sets(&levels, 1 << 20),
            [16 << 10, 64 << 10, 512 << 10]
        );
        let empty = scratch("empty");
        assert!(cache_levels(&empty).unwrap_err().contains("no data cache"));
        assert!(cache_levels(&empty.join("none")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&empty);
    }

    #[test]
    fn a_layer_side_gives_the_working_set_asked() {
        for bytes in [16u64 << 10, 1 << 20, 64 << 20] {
            let n = side(bytes);
            assert!(
                bytes_of(n) <= bytes as f64 && bytes_of(n + 1) > bytes as f64,
                "{bytes}: {n}"
            );
        }
    }
}
