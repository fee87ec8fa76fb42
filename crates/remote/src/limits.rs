//! The bounds of the transfers' settings, and their environment: what every door checks a
//! value against (the command line's flags, Python's keywords, `CACHELESS_*` variables), with
//! the same words.

use std::time::Duration;

use cacheless::{Error, ErrorKind, Result};

use crate::client::RemoteOptions;

fn range(flag: &str, v: u64, lo: u64, hi: u64, what: &str) -> std::result::Result<usize, String> {
    if v < lo || v > hi {
        return Err(format!("{flag} {v}: out of range ({what})"));
    }
    usize::try_from(v).map_err(|_| format!("{flag} {v}: out of range"))
}

/// Bytes per ranged GET and per part: 64 KiB to 5 GiB (S3's largest part).
pub fn part_size(flag: &str, v: u64) -> std::result::Result<usize, String> {
    range(flag, v, 64 << 10, 5 << 30, "from 64K to 5G")
}

/// Requests in flight per transfer: 1 to 256.
pub fn concurrency(flag: &str, v: u64) -> std::result::Result<usize, String> {
    range(flag, v, 1, 256, "a whole number from 1 to 256")
}

/// Retries of a failed request: 0 to 100.
pub fn retries(flag: &str, v: u64) -> std::result::Result<usize, String> {
    range(flag, v, 0, 100, "a whole number from 0 to 100")
}

/// Seconds a response may send nothing: 0.1 to 3600.
pub fn read_timeout(flag: &str, v: f64) -> std::result::Result<Duration, String> {
    if !(0.1..=3600.0).contains(&v) {
        return Err(format!("{flag} {v}: out of range (seconds, from 0.1 to 3600)"));
    }
    Ok(Duration::from_secs_f64(v))
}

impl RemoteOptions {
    /// The defaults, with what the environment sets by the command line's names:
    /// `CACHELESS_PART_SIZE` (a size such as `16M`), `CACHELESS_CONCURRENCY`,
    /// `CACHELESS_RETRIES`, `CACHELESS_READ_TIMEOUT` (seconds) and `CACHELESS_NO_SIGN_REQUEST`
    /// (`1`). The store's own (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_CA_BUNDLE`, the keys) are
    /// read where a client is made. A bad value is an error naming the variable.
    pub fn from_env() -> Result<RemoteOptions> {
        let mut o = RemoteOptions::default();
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let bad = |name: &str, e: String| Error::new(ErrorKind::InvalidInput, "read the environment", name, e);
        if let Some(v) = var("CACHELESS_PART_SIZE") {
            let n = cacheless::parse_size(&v).map_err(|e| bad("CACHELESS_PART_SIZE", e.to_string()))?;
            o.part_size = part_size("CACHELESS_PART_SIZE", n).map_err(|e| bad("CACHELESS_PART_SIZE", e))?;
        }
        let count = |name: &str, check: fn(&str, u64) -> std::result::Result<usize, String>| -> Result<Option<usize>> {
            match var(name) {
                None => Ok(None),
                Some(v) => {
                    let n = v.trim().parse::<u64>().map_err(|_| bad(name, format!("{name} {v}: not a whole number")))?;
                    check(name, n).map(Some).map_err(|e| bad(name, e))
                }
            }
        };
        if let Some(c) = count("CACHELESS_CONCURRENCY", concurrency)? {
            o.concurrency = c;
        }
        if let Some(r) = count("CACHELESS_RETRIES", retries)? {
            o.retries = r;
        }
        if let Some(v) = var("CACHELESS_READ_TIMEOUT") {
            let f = v.trim().parse::<f64>().map_err(|_| bad("CACHELESS_READ_TIMEOUT", format!("CACHELESS_READ_TIMEOUT {v}: not a number of seconds")))?;
            o.stall = read_timeout("CACHELESS_READ_TIMEOUT", f).map_err(|e| bad("CACHELESS_READ_TIMEOUT", e))?;
        }
        if let Some(v) = var("CACHELESS_NO_SIGN_REQUEST") {
            o.no_sign_request = match v.trim() {
                "1" | "true" | "yes" => true,
                "0" | "false" | "no" => false,
                other => return Err(bad("CACHELESS_NO_SIGN_REQUEST", format!("CACHELESS_NO_SIGN_REQUEST {other}: 1 or 0"))),
            };
        }
        Ok(o)
    }
}
