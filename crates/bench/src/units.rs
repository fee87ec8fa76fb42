//! Sizes in words, as the tables, sentences and messages print them.

pub use cacheless::human_bytes;

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
        assert_eq!(human_signed(1536.0), "+1.5 KiB");
        assert_eq!(human_signed(-2048.0), "-2.0 KiB");
    }
}
