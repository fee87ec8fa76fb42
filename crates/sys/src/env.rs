//! Switches read from the environment. A leaf, so that every floor of the engine can ask.

/// Features the user turned off with
/// `CACHELESS_DISABLE=direct,dontcache,uring,cachestat,hugepages,tmpfile,flink,ahead`.
/// The variable is read once, at the first question: every module asks this one place.
pub fn disabled(feature: &str) -> bool {
    names().iter().any(|f| f.eq_ignore_ascii_case(feature))
}

/// The names in `CACHELESS_DISABLE`, read once.
fn names() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let v = std::env::var("CACHELESS_DISABLE").unwrap_or_default();
        v.split(',').map(str::trim).filter(|f| !f.is_empty()).map(str::to_string).collect()
    })
}

/// The features `CACHELESS_DISABLE` can name.
pub const FEATURES: [&str; 8] = ["direct", "dontcache", "uring", "cachestat", "hugepages", "tmpfile", "flink", "ahead"];

/// The names in `CACHELESS_DISABLE` that are no feature (a typo would otherwise leave on what
/// the user meant to turn off, silently).
pub fn unknown_disabled() -> Vec<String> {
    names().iter().filter(|f| !FEATURES.iter().any(|k| k.eq_ignore_ascii_case(f))).cloned().collect()
}

/// The error for names in `CACHELESS_DISABLE` that are no feature, if there are any: every
/// front end refuses to run with one (the command line as a usage error, Python at import).
pub fn check_disabled() -> Result<(), String> {
    let unknown = unknown_disabled();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "CACHELESS_DISABLE: unknown feature {} (known: {})",
        unknown.iter().map(|u| format!("'{u}'")).collect::<Vec<_>>().join(", "),
        FEATURES.join(", ")
    ))
}
