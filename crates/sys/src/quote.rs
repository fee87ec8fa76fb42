//! Names in messages, quoted so that any name reads back as itself and none can act on the
//! terminal: the quoting GNU tools use for file names in their diagnostics (gnulib's
//! `shell-escape-always` style), so that a message names a file exactly as GNU cp's would.
//!
//! A name is put in single quotes; a single quote in it is written `'\''` (or the whole name
//! goes in double quotes where that needs no escape at all: `"it's"`); a byte that does not
//! print (a control character, and in a locale that is not UTF-8 any byte above 0x7f; in a
//! UTF-8 locale a byte that is not part of a valid character) is written as a `$'\n'` or
//! `$'\033'` escape outside the quotes, as a POSIX shell reads it back.

use std::ffi::OsStr;
use std::sync::OnceLock;

/// `name` quoted for a message (see the module documentation).
pub fn quote(name: impl AsRef<OsStr>) -> String {
    quote_in(name.as_ref().as_encoded_bytes(), utf8_locale())
}

/// `name` in GNU's `escape` quoting, as GNU tar lists member names (`tar -v`): no quotes, a
/// backslash doubled, a byte that does not print (as for [`quote`]) written `\n`, `\033`, ...
pub fn escape(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    for p in pieces(name, utf8_locale()) {
        match p {
            Piece::Plain(b"\\") => out.extend_from_slice(b"\\\\"),
            Piece::Plain(s) => out.extend_from_slice(s),
            Piece::Escape(c) => out.extend_from_slice(escaped(c).as_bytes()),
        }
    }
    out
}

/// Writes a path into a report (JSON, Python): as itself where it is UTF-8, else with each byte
/// that is not part of a UTF-8 character as a `\ooo` octal escape and each backslash doubled
/// (the form [`escape`] gives in a UTF-8 locale), whatever the locale. Never an error: a report
/// of a file with any name can be written.
pub fn serialize_path<S: serde::Serializer>(path: &std::path::Path, s: S) -> Result<S::Ok, S::Error> {
    match path.to_str() {
        Some(p) => s.serialize_str(p),
        None => {
            let mut out = Vec::new();
            for p in pieces(path.as_os_str().as_encoded_bytes(), true) {
                match p {
                    Piece::Plain(b"\\") => out.extend_from_slice(b"\\\\"),
                    Piece::Plain(b) => out.extend_from_slice(b),
                    Piece::Escape(c) if c >= 0x80 => out.extend_from_slice(format!("\\{c:03o}").as_bytes()),
                    // Control characters: JSON escapes them itself.
                    Piece::Escape(c) => out.push(c),
                }
            }
            s.serialize_str(&String::from_utf8_lossy(&out))
        }
    }
}

/// The backslash escape of a byte that does not print: `\n` and its kind, else octal.
fn escaped(c: u8) -> String {
    match c {
        0x07 => "\\a".into(),
        0x08 => "\\b".into(),
        0x0c => "\\f".into(),
        b'\n' => "\\n".into(),
        b'\r' => "\\r".into(),
        b'\t' => "\\t".into(),
        0x0b => "\\v".into(),
        c => format!("\\{c:03o}"),
    }
}

/// Whether the locale's characters are UTF-8 (LC_ALL, else LC_CTYPE, else LANG, as setlocale
/// reads them); read once.
fn utf8_locale() -> bool {
    static UTF8: OnceLock<bool> = OnceLock::new();
    *UTF8.get_or_init(|| {
        let l = ["LC_ALL", "LC_CTYPE", "LANG"].iter().find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty())).unwrap_or_default().to_ascii_lowercase();
        l.contains("utf-8") || l.contains("utf8")
    })
}

/// One piece of a name: a character that prints as itself, or a byte that needs an escape.
enum Piece<'a> {
    Plain(&'a [u8]),
    Escape(u8),
}

/// The name cut into printable characters and bytes to escape.
fn pieces(b: &[u8], utf8: bool) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if (0x20..0x7f).contains(&c) {
            out.push(Piece::Plain(&b[i..=i]));
            i += 1;
            continue;
        }
        if utf8 && c >= 0x80 {
            let len = match c {
                0xc2..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf4 => 4,
                _ => 0,
            };
            if len > 0 && i + len <= b.len() {
                if let Ok(s) = std::str::from_utf8(&b[i..i + len]) {
                    if s.chars().all(|ch| !ch.is_control()) {
                        out.push(Piece::Plain(&b[i..i + len]));
                        i += len;
                        continue;
                    }
                }
            }
        }
        out.push(Piece::Escape(c));
        i += 1;
    }
    out
}

fn quote_in(b: &[u8], utf8: bool) -> String {
    let pieces = pieces(b, utf8);
    let needs_escape = pieces.iter().any(|p| matches!(p, Piece::Escape(_)));
    let has_quote = b.contains(&b'\'');
    // A single quote and nothing a double-quoted word would treat specially: in double quotes.
    if has_quote && !needs_escape && !b.iter().any(|c| b"\"$`\\!".contains(c)) {
        return format!("\"{}\"", String::from_utf8_lossy(b));
    }
    let mut out = String::from("'");
    let mut in_quotes = true;
    let mut in_escape = false;
    for p in &pieces {
        match p {
            Piece::Plain(s) => {
                if in_escape {
                    out.push('\'');
                    in_escape = false;
                }
                if !in_quotes {
                    out.push('\'');
                    in_quotes = true;
                }
                if *s == b"'" {
                    out.push_str("'\\''");
                } else {
                    out.push_str(&String::from_utf8_lossy(s));
                }
            }
            Piece::Escape(c) => {
                if !in_escape {
                    if in_quotes {
                        out.push('\'');
                        in_quotes = false;
                    }
                    out.push_str("$'");
                    in_escape = true;
                }
                out.push_str(&escaped(*c));
            }
        }
    }
    if in_escape || in_quotes {
        out.push('\'');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::quote_in;

    /// Each as GNU cp 9.1 quotes it in the C locale (`cp -- NAME /nonexistent/`).
    #[test]
    fn names_are_quoted_as_gnu_quotes_them() {
        let c = |s: &[u8]| quote_in(s, false);
        assert_eq!(c(b"plain"), "'plain'");
        assert_eq!(c(b""), "''");
        assert_eq!(c(b"it's"), "\"it's\"");
        assert_eq!(c(b"'"), "\"'\"");
        assert_eq!(c(b"a'b c"), "\"a'b c\"");
        assert_eq!(c(b"it's $x"), "'it'\\''s $x'");
        assert_eq!(c(b"a'b\"c"), "'a'\\''b\"c'");
        assert_eq!(c(b"a\nb"), "'a'$'\\n''b'");
        assert_eq!(c(b"\n"), "''$'\\n'");
        assert_eq!(c(b"a'b\nc"), "'a'\\''b'$'\\n''c'");
        assert_eq!(c(b"a\nb'c"), "'a'$'\\n''b'\\''c'");
        assert_eq!(c(b"\x07\x08\x0c\r\x0b"), "''$'\\a\\b\\f\\r\\v'");
        assert_eq!(c(b"x\x01y"), "'x'$'\\001''y'");
        assert_eq!(c(b"a\x7f"), "'a'$'\\177'");
        assert_eq!(c(b"\x1b[2J"), "''$'\\033''[2J'");
        assert_eq!(c("é".as_bytes()), "''$'\\303\\251'");
        assert_eq!(c(b"a\\b"), "'a\\b'");
        // In a UTF-8 locale a valid character prints as itself; a stray byte does not.
        assert_eq!(quote_in("é".as_bytes(), true), "'é'");
        assert_eq!(quote_in(b"\xff", true), "''$'\\377'");
    }
}
