//! GNU tar's `--transform` (`--xform`): sed-like `s/REGEX/REPLACEMENT/FLAGS` expressions, applied
//! in order to member names and link targets before anything else is done with them.
//!
//! The expressions are GNU's: any delimiter after `s`; several in one argument separated by
//! `;`; flags `g` (every match), a number N (the Nth match), `i` (ignore case), `x` (extended
//! regular expressions; basic ones by default), and `r`/`R`, `s`/`S`, `h`/`H`, which apply it to
//! (or keep it from) member names, symlink targets and hard link targets; `flags=...;` sets the
//! default of those three for the expressions after it. In a replacement: `&` and `\0`..`\9`,
//! the escapes `\n`, `\t` and the rest, and GNU's case conversions `\U`, `\L`, `\u`, `\l`, `\E`.
//!
//! POSIX regular expressions are translated to the `regex` crate's syntax, matched byte by
//! byte (as GNU's in the C locale). Two differences remain, both said in docs/extract.md: a
//! back reference inside the pattern (`\(a\)\1`) is refused, and where several alternatives
//! match at the same place the first one written wins, where POSIX takes the longest.

use regex::bytes::{Captures, Regex};

/// What an expression applies to (GNU's `XFORM_*`).
pub const NAMES: u8 = 1;
/// Hard link targets.
pub const HARD_LINKS: u8 = 2;
/// Symlink targets.
pub const SYMLINKS: u8 = 4;

/// The expressions of every `--transform`, in order.
#[derive(Debug, Default)]
pub struct Transform {
    exprs: Vec<Expr>,
    /// The `r`/`s`/`h` default for the next expression parsed (`flags=`).
    default_scope: u8,
}

#[derive(Debug)]
struct Expr {
    regex: Regex,
    replacement: Vec<Segment>,
    /// Every match (`g`), or only the `nth` (1 when no number is given).
    global: bool,
    nth: usize,
    scope: u8,
}

#[derive(Debug)]
enum Segment {
    Literal(Vec<u8>),
    Group(usize),
    Case(Case),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    Stop,
    UpperNext,
    LowerNext,
    Upper,
    Lower,
}

impl Transform {
    /// No expressions yet.
    pub fn new() -> Transform {
        Transform { exprs: Vec::new(), default_scope: NAMES | HARD_LINKS | SYMLINKS }
    }

    /// Adds the expressions of one `--transform` argument; the error is GNU's words.
    pub fn add(&mut self, arg: &[u8]) -> Result<(), String> {
        let mut rest = arg;
        while !rest.is_empty() {
            rest = self.parse_one(rest)?;
        }
        Ok(())
    }

    /// Whether there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.exprs.is_empty()
    }

    fn parse_one<'a>(&mut self, expr: &'a [u8]) -> Result<&'a [u8], String> {
        let invalid = || "Invalid transform expression".to_string();
        if expr.first() != Some(&b's') {
            let Some(flags) = expr.strip_prefix(b"flags=") else { return Err(invalid()) };
            self.default_scope = 0;
            let mut i = 0;
            while i < flags.len() && flags[i] != b';' {
                self.default_scope = scope_flag(self.default_scope, flags[i]).ok_or_else(|| format!("Unknown transform flag: {}", flags[i] as char))?;
                i += 1;
            }
            return Ok(&flags[(i + 1).min(flags.len())..]);
        }
        let delim = *expr.get(1).ok_or_else(invalid)?;
        // The pattern and the replacement end at the next unescaped delimiter.
        let end_of = |from: usize| -> Option<usize> {
            let mut i = from;
            while i < expr.len() && expr[i] != delim {
                i += if expr[i] == b'\\' && i + 1 < expr.len() { 2 } else { 1 };
            }
            (i < expr.len()).then_some(i)
        };
        let i = end_of(2).ok_or_else(invalid)?;
        let j = end_of(i + 1).ok_or_else(invalid)?;
        let (mut global, mut nth, mut icase, mut extended, mut scope) = (false, 0usize, false, false, self.default_scope);
        let mut p = j + 1;
        while p < expr.len() && expr[p] != b';' {
            match expr[p] {
                b'g' => global = true,
                b'i' => icase = true,
                b'x' => extended = true,
                b'0'..=b'9' => {
                    let start = p;
                    while p + 1 < expr.len() && expr[p + 1].is_ascii_digit() {
                        p += 1;
                    }
                    nth = std::str::from_utf8(&expr[start..=p]).ok().and_then(|s| s.parse().ok()).ok_or_else(invalid)?;
                }
                c => scope = scope_flag(scope, c).ok_or_else(|| format!("Unknown flag in transform expression: {}", c as char))?,
            }
            p += 1;
        }
        let rest = &expr[(p + 1).min(expr.len())..];
        let pattern = &expr[2..i];
        let (translated, groups) = translate(pattern, extended)?;
        let regex = regex::bytes::RegexBuilder::new(&translated)
            .unicode(false)
            .case_insensitive(icase)
            .dot_matches_new_line(true)
            .build()
            .map_err(|e| format!("Invalid transform expression: {e}"))?;
        // GNU: an anchored pattern is replaced once whatever the flags say.
        if pattern.first() == Some(&b'^') || pattern.last() == Some(&b'$') {
            global = false;
        }
        let replacement = parse_replacement(&expr[i + 1..j], delim, groups)?;
        self.exprs.push(Expr { regex, replacement, global, nth: nth.max(1), scope });
        Ok(rest)
    }

    /// `name` with every expression that applies to `what` (one of [`NAMES`], [`HARD_LINKS`],
    /// [`SYMLINKS`]) applied in order; `None` where none applies.
    pub fn apply(&self, name: &[u8], what: u8) -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        for e in self.exprs.iter().filter(|e| e.scope & what != 0) {
            out = Some(e.apply(out.as_deref().unwrap_or(name)));
        }
        out
    }
}

/// GNU's `r`/`R`, `h`/`H`, `s`/`S`: `scope` with the flag's kind added or taken away.
fn scope_flag(scope: u8, c: u8) -> Option<u8> {
    Some(match c {
        b'r' => scope | NAMES,
        b'R' => scope & !NAMES,
        b'h' => scope | HARD_LINKS,
        b'H' => scope & !HARD_LINKS,
        b's' => scope | SYMLINKS,
        b'S' => scope & !SYMLINKS,
        _ => return None,
    })
}

impl Expr {
    fn apply(&self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len() + 16);
        let mut at = 0;
        let mut seen = 0;
        // Matched as GNU matches: the search starts again after each match.
        while at <= input.len() {
            let Some(caps) = self.regex.captures_at(input, at) else { break };
            let Some(m) = caps.get(0) else { break };
            out.extend_from_slice(&input[at..m.start()]);
            seen += 1;
            if seen < self.nth {
                out.extend_from_slice(m.as_bytes());
            } else {
                self.replace(&caps, &mut out);
            }
            // An empty match moves on by one byte (kept), else it would match there forever.
            at = if m.end() == m.start() {
                if m.end() < input.len() {
                    out.push(input[m.end()]);
                }
                m.end() + 1
            } else {
                m.end()
            };
            if seen >= self.nth && !self.global {
                break;
            }
        }
        if at < input.len() {
            out.extend_from_slice(&input[at..]);
        }
        out
    }

    fn replace(&self, caps: &Captures<'_>, out: &mut Vec<u8>) {
        let (mut case, mut saved) = (Case::Stop, Case::Stop);
        for seg in &self.replacement {
            let text: &[u8] = match seg {
                Segment::Literal(l) => l,
                Segment::Group(n) => caps.get(*n).map_or(&[][..], |m| m.as_bytes()),
                Segment::Case(c) => {
                    if matches!(c, Case::UpperNext | Case::LowerNext) && !matches!(saved, Case::UpperNext | Case::LowerNext) {
                        saved = case;
                    }
                    case = *c;
                    continue;
                }
            };
            let start = out.len();
            out.extend_from_slice(text);
            let added = &mut out[start..];
            match case {
                Case::Stop => {}
                Case::Upper => added.make_ascii_uppercase(),
                Case::Lower => added.make_ascii_lowercase(),
                Case::UpperNext | Case::LowerNext => {
                    if let Some(first) = added.first_mut() {
                        *first = if case == Case::UpperNext { first.to_ascii_uppercase() } else { first.to_ascii_lowercase() };
                    }
                    // A one-character conversion ends with the segment it touched.
                    case = saved;
                    saved = Case::Stop;
                }
            }
        }
    }
}

/// A replacement's segments; `groups` is how many the pattern has.
fn parse_replacement(r: &[u8], delim: u8, groups: usize) -> Result<Vec<Segment>, String> {
    let mut segs = Vec::new();
    let mut lit = Vec::new();
    let mut i = 0;
    let flush = |lit: &mut Vec<u8>, segs: &mut Vec<Segment>| {
        if !lit.is_empty() {
            segs.push(Segment::Literal(std::mem::take(lit)));
        }
    };
    while i < r.len() {
        match r[i] {
            b'&' => {
                flush(&mut lit, &mut segs);
                segs.push(Segment::Group(0));
                i += 1;
            }
            b'\\' if i + 1 < r.len() => {
                let c = r[i + 1];
                i += 2;
                let case = match c {
                    b'L' => Some(Case::Lower),
                    b'l' => Some(Case::LowerNext),
                    b'U' => Some(Case::Upper),
                    b'u' => Some(Case::UpperNext),
                    b'E' => Some(Case::Stop),
                    _ => None,
                };
                if let Some(case) = case {
                    flush(&mut lit, &mut segs);
                    segs.push(Segment::Case(case));
                    continue;
                }
                match c {
                    b'0'..=b'9' => {
                        let n = usize::from(c - b'0');
                        if n > groups {
                            return Err("Invalid transform replacement: back reference out of range".into());
                        }
                        flush(&mut lit, &mut segs);
                        segs.push(Segment::Group(n));
                    }
                    b'\\' => lit.push(b'\\'),
                    b'a' => lit.push(7),
                    b'b' => lit.push(8),
                    b'f' => lit.push(12),
                    b'n' => lit.push(b'\n'),
                    b'r' => lit.push(b'\r'),
                    b't' => lit.push(b'\t'),
                    b'v' => lit.push(11),
                    b'&' => lit.push(b'&'),
                    c if c == delim => lit.push(c),
                    c => lit.extend_from_slice(&[b'\\', c]),
                }
            }
            c => {
                lit.push(c);
                i += 1;
            }
        }
    }
    flush(&mut lit, &mut segs);
    Ok(segs)
}

/// A POSIX basic (or, with `extended`, extended) regular expression in the `regex` crate's
/// syntax, and how many groups it has.
fn translate(p: &[u8], extended: bool) -> Result<(String, usize), String> {
    let mut out = String::new();
    let mut groups = 0;
    let mut i = 0;
    // Where '*' is literal and '^' an anchor in a basic expression: at the start of it, of a
    // group or of an alternative.
    let mut at_start = true;
    while i < p.len() {
        let c = p[i];
        let start = at_start;
        at_start = false;
        match c {
            b'[' => {
                i = bracket(p, i, &mut out)?;
                continue;
            }
            b'\\' if i + 1 < p.len() => {
                let n = p[i + 1];
                i += 2;
                match n {
                    b'(' if !extended => {
                        groups += 1;
                        out.push('(');
                        at_start = true;
                    }
                    b')' if !extended => out.push(')'),
                    b'{' if !extended => out.push('{'),
                    b'}' if !extended => out.push('}'),
                    b'|' if !extended => {
                        out.push('|');
                        at_start = true;
                    }
                    b'+' | b'?' if !extended => out.push(n as char),
                    b'1'..=b'9' => return Err("Invalid transform expression: back references in the pattern are not supported".into()),
                    b'<' | b'>' | b'b' => out.push_str("\\b"),
                    b'B' => out.push_str("\\B"),
                    b'w' => out.push_str("[0-9A-Za-z_]"),
                    b'W' => out.push_str("[^0-9A-Za-z_]"),
                    b's' => out.push_str("[[:space:]]"),
                    b'S' => out.push_str("[^[:space:]]"),
                    b'`' => out.push_str("\\A"),
                    b'\'' => out.push_str("\\z"),
                    n => push_literal(&mut out, n),
                }
                continue;
            }
            b'*' if start && !extended => push_literal(&mut out, c),
            b'^' if start || extended => {
                out.push('^');
                at_start = true;
            }
            b'$' if extended || i + 1 == p.len() || p[i + 1..].starts_with(b"\\)") || p[i + 1..].starts_with(b"\\|") => out.push('$'),
            b'.' | b'*' => out.push(c as char),
            b'(' if extended => {
                groups += 1;
                out.push('(');
                at_start = true;
            }
            b')' | b'{' | b'}' | b'+' | b'?' if extended => out.push(c as char),
            b'|' if extended => {
                out.push('|');
                at_start = true;
            }
            c => push_literal(&mut out, c),
        }
        i += 1;
    }
    Ok((out, groups))
}

/// Copies the bracket expression at `p[i]` (`[...]`, POSIX's: a `]` first is a member, a
/// backslash is itself, `[:class:]` named) to `out`; returns where it ends.
fn bracket(p: &[u8], mut i: usize, out: &mut String) -> Result<usize, String> {
    out.push('[');
    i += 1;
    if p.get(i) == Some(&b'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    loop {
        let Some(&c) = p.get(i) else { return Err("Invalid transform expression: unmatched [".into()) };
        if c == b']' && !first {
            out.push(']');
            return Ok(i + 1);
        }
        first = false;
        if c == b'[' && matches!(p.get(i + 1), Some(b':' | b'.' | b'=')) {
            let kind = p[i + 1];
            let end = p[i + 2..].windows(2).position(|w| w[0] == kind && w[1] == b']').ok_or("Invalid transform expression: unmatched [")?;
            let inner = &p[i + 2..i + 2 + end];
            match kind {
                b':' => out.push_str(&format!("[:{}:]", String::from_utf8_lossy(inner))),
                // A collating element or equivalence class: the character itself.
                _ => inner.iter().for_each(|&b| push_literal(out, b)),
            }
            i += 2 + end + 2;
            continue;
        }
        if c == b'-' && p.get(i + 1) != Some(&b']') && !out.ends_with('[') && !out.ends_with('^') {
            out.push('-');
        } else {
            push_literal(out, c);
        }
        i += 1;
    }
}

/// A literal byte, in a class or out of one: a letter or digit as itself, any other byte by
/// its code (a backslash before some punctuation means something to the `regex` crate: `\<`
/// is a word boundary there).
fn push_literal(out: &mut String, c: u8) {
    if c.is_ascii_alphanumeric() || c == b'_' {
        out.push(c as char);
    } else {
        out.push_str(&format!("\\x{c:02x}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(exprs: &[&str], name: &str) -> String {
        let mut t = Transform::new();
        for e in exprs {
            t.add(e.as_bytes()).unwrap();
        }
        String::from_utf8(t.apply(name.as_bytes(), NAMES).unwrap_or_else(|| name.as_bytes().to_vec())).unwrap()
    }

    #[test]
    fn sed_expressions_as_gnu_tar_applies_them() {
        assert_eq!(run(&["s/c/d/"], "a/c/c"), "a/d/c");
        assert_eq!(run(&["s/c/d/g"], "a/c/c"), "a/d/d");
        assert_eq!(run(&["s/c/d/2"], "c/c/c"), "c/d/c");
        assert_eq!(run(&["s/c/d/2g"], "c/c/c"), "c/d/d");
        assert_eq!(run(&["s,^,top/,"], "a/b"), "top/a/b");
        assert_eq!(run(&["s/^\\(a*\\)\\(b\\)/\\2\\1/"], "aab/x"), "baa/x");
        assert_eq!(run(&["s/(a+)(b)/\\2-\\1/x"], "aab"), "b-aa");
        assert_eq!(run(&["s/a+b/X/"], "a+b aab"), "X aab");
        assert_eq!(run(&["s/[.]o$/.obj/"], "x.o"), "x.obj");
        assert_eq!(run(&["s/[]a]/_/g"], "]ab"), "__b");
        assert_eq!(run(&["s/[[:digit:]]\\{2\\}/N/"], "v12"), "vN");
        assert_eq!(run(&["s/.*/\\U&/"], "Name"), "NAME");
        assert_eq!(run(&["s/\\(.\\)\\(.*\\)/\\u\\1\\L\\2/"], "nAME"), "Name");
        assert_eq!(run(&["s/A/b/i"], "aA"), "bA");
        assert_eq!(run(&["s/x*/-/g"], "abc"), "-a-b-c-");
        assert_eq!(run(&["s/a/b/;s/b/c/"], "a"), "c");
        assert_eq!(run(&["s|a/|&&|"], "a/b"), "a/a/b");
        assert_eq!(run(&["s/\\//_/g"], "a/b"), "a_b");
    }

    #[test]
    fn scope_flags_choose_what_is_transformed() {
        let mut t = Transform::new();
        t.add(b"s/a/b/S").unwrap();
        assert_eq!(t.apply(b"a", NAMES), Some(b"b".to_vec()));
        assert_eq!(t.apply(b"a", SYMLINKS), None);
        let mut t = Transform::new();
        t.add(b"flags=h;s/a/b/").unwrap();
        assert_eq!((t.apply(b"a", NAMES), t.apply(b"a", HARD_LINKS)), (None, Some(b"b".to_vec())));
    }

    #[test]
    fn bad_expressions_are_refused_in_gnus_words() {
        for (e, words) in [
            ("x/a/b/", "Invalid transform expression"),
            ("s/a/b", "Invalid transform expression"),
            ("s/a/b/q", "Unknown flag in transform expression: q"),
            ("s/a/\\1/", "back reference out of range"),
            ("s/\\(a\\)\\1/b/", "back references in the pattern"),
        ] {
            let err = Transform::new().add(e.as_bytes()).unwrap_err();
            assert!(err.contains(words), "{e}: {err}");
        }
    }
}
