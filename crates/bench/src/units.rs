//! Sizes in words, as the tables, sentences and messages print them.

/// `1.5 GiB`-style sizes.
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

/// A size change: [`human_bytes`] with a `+` in front of a growth.
pub fn human_signed(b: f64) -> String {
    if b > 0.0 {
        format!("+{}", human_bytes(b))
    } else {
        human_bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(0.0), "0 B");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
        assert_eq!(human_bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0 GiB");
        assert_eq!(human_signed(-2048.0), "-2.0 KiB");
    }
}
