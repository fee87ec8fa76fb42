//! Switches read from the environment. A leaf, so that every floor of the engine can ask.

/// Features the user turned off with
/// `CACHELESS_DISABLE=direct,dontcache,uring,cachestat,hugepages,tmpfile,flink`.
pub fn disabled(feature: &str) -> bool {
    std::env::var("CACHELESS_DISABLE").map(|v| v.split(',').any(|f| f.trim().eq_ignore_ascii_case(feature))).unwrap_or(false)
}
