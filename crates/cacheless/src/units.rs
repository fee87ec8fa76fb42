//! Sizes in and out: `512k`, `4M`, `1GiB` from the command line and keywords, and `1.5 GiB` in
//! messages and tables (binary units both ways); times of day in UTC. A leaf.

/// Parses a size such as `4096`, `512k`, `4M`, `1GiB` or `1.5G` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => return Err(format!("invalid size '{s}': unknown unit '{u}' (use k, M, G or T)")),
    };
    let invalid = || format!("invalid size '{s}': expected a number with an optional unit (k, M, G, T)");
    if !num.contains('.') {
        // Whole numbers exactly (a float has 53 bits: 2^53 + 1 bytes would come out one short).
        let n: u64 = num.parse().map_err(|e: std::num::ParseIntError| match e.kind() {
            std::num::IntErrorKind::PosOverflow => format!("invalid size '{s}': out of range"),
            _ => invalid(),
        })?;
        return n.checked_mul(mult).ok_or_else(|| format!("invalid size '{s}': out of range"));
    }
    let n: f64 = num.parse().map_err(|_| invalid())?;
    let v = n * mult as f64;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("invalid size '{s}': out of range"));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Checked above: finite, in 0..=u64::MAX.
    Ok(v as u64)
}

/// `1.5 GiB`-style sizes (binary units; whole bytes below 1 KiB).
pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v.abs() >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// Seconds since the epoch as the UTC time `YYYY-MM-DD HH:MM:SS` (Howard Hinnant's
/// days-to-civil; any year, before 1970 too).
pub fn utc_time(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_exactly_and_refuse_what_does_not_fit() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 512k "), Ok(512 << 10));
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        // Whole numbers are exact: through a float, 2^53 + 1 came out as 2^53.
        assert_eq!(parse_size("9007199254740993"), Ok(9_007_199_254_740_993));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        for bad in ["18446744073709551616", "16777216T", "", "k", "1.5.5", "-1", "12q"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(human_bytes(0.0), "0 B");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
        assert_eq!(human_bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0 GiB");
        assert_eq!(human_bytes(-2048.0), "-2.0 KiB");
    }
}
