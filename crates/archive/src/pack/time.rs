//! `--mtime`'s times: seconds since the epoch, or a UTC date and time turned into them by a
//! small calendar of its own.

/// Parses a time for `--mtime`: `@SECONDS`, `SECONDS`, `YYYY-MM-DD`, or
/// `YYYY-MM-DD[T ]HH:MM[:SS[.FRAC]]` with an optional `Z` (UTC in every case).
pub fn parse_time(s: &str) -> Result<(i64, u32), String> {
    let t = s.trim();
    let bad = || format!("invalid time '{s}': expected @SECONDS, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS (UTC)");
    let num = t.strip_prefix('@').unwrap_or(t);
    if !num.is_empty() && num.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) {
        return num.parse::<i64>().map(|v| (v, 0)).map_err(|_| bad());
    }
    let t = t.strip_suffix('Z').unwrap_or(t);
    let (date, time) = match t.split_once(['T', ' ']) {
        Some((d, tm)) => (d, Some(tm)),
        None => (t, None),
    };
    let d: Vec<&str> = date.split('-').collect();
    if d.len() != 3 {
        return Err(bad());
    }
    let (y, m, day): (i64, u32, u32) = (d[0].parse().map_err(|_| bad())?, d[1].parse().map_err(|_| bad())?, d[2].parse().map_err(|_| bad())?);
    // A day the month does not have (2023-02-29, 2024-04-31) is refused, never carried into
    // the next month.
    let leap = y.rem_euclid(4) == 0 && (y.rem_euclid(100) != 0 || y.rem_euclid(400) == 0);
    let month_days = match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=12).contains(&m) || !(1..=month_days).contains(&day) {
        return Err(format!("invalid time '{s}': no day {day} in month {m} of {y}"));
    }
    let (mut secs, mut nanos) = (0i64, 0u32);
    if let Some(tm) = time {
        let (hms, frac) = tm.split_once('.').unwrap_or((tm, ""));
        let p: Vec<&str> = hms.split(':').collect();
        if !(2..=3).contains(&p.len()) {
            return Err(bad());
        }
        let v: Vec<i64> = p.iter().map(|x| x.parse::<i64>().map_err(|_| bad())).collect::<Result<_, _>>()?;
        if v.iter().any(|&x| x < 0) || v[0] > 23 || v[1] > 59 || v.get(2).is_some_and(|&s| s > 60) {
            return Err(bad());
        }
        secs = v[0] * 3600 + v[1] * 60 + v.get(2).copied().unwrap_or(0);
        for (c, scale) in frac.chars().zip(crate::tarparse::DIGIT_SCALES) {
            nanos += c.to_digit(10).ok_or_else(bad)? * scale;
        }
    }
    // Days from the civil date (Howard Hinnant's algorithm), proleptic Gregorian calendar.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    // A year too far out for seconds in an i64 is refused, not wrapped into another date.
    let days = era.checked_mul(146097).and_then(|d| d.checked_add(doe - 719468));
    let t = days.and_then(|d| d.checked_mul(86400)).and_then(|t| t.checked_add(secs));
    t.map(|t| (t, nanos)).ok_or_else(|| format!("invalid time '{s}': out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_utc() {
        assert_eq!(parse_time("@1700000000"), Ok((1_700_000_000, 0)));
        assert_eq!(parse_time("0"), Ok((0, 0)));
        assert_eq!(parse_time("1970-01-01"), Ok((0, 0)));
        assert_eq!(parse_time("2000-03-01T00:00:00Z"), Ok((951_868_800, 0)));
        assert_eq!(parse_time("2024-02-29 12:34:56.5"), Ok((1_709_210_096, 500_000_000)));
        assert_eq!(parse_time("2000-02-29"), Ok((951_782_400, 0)), "2000 is a leap year");
        assert_eq!(parse_time("1969-12-31T23:59:59"), Ok((-1, 0)));
        // Found by the parse_args fuzz target: a year this large wrapped around i64.
        assert!(parse_time("020281021000024-1-04").is_err());
        assert!(parse_time("9223372036854775807-12-31").is_err());
        // And a negative hour overflowed when turned into seconds.
        assert!(parse_time("20407199-01-01T-8044444444444444443:00").is_err());
        assert!(parse_time("2024-01-01T-1:00").is_err());
        assert_eq!(parse_time("292277026596-12-04T15:30:07"), Ok((i64::MAX, 0)), "the last second an i64 holds");
        for bad in ["yesterday", "2024-13-01", "2024-01-01T25:00", "2024-01", "", "2023-02-29", "2024-02-30", "2024-04-31", "1900-02-29", "2024-00-10"] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}
