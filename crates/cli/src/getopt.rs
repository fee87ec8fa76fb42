//! Command lines read the way GNU programs read theirs (glibc's `getopt_long`), for the commands
//! that stand in for a GNU tool (`cp`): options and operands in any order unless
//! `POSIXLY_CORRECT` is set, `--` ending the options, bundled short options (`-aRv`), a short
//! option's argument attached or next (`-tDIR`, `-t DIR`), a long option's argument after `=`
//! or next, optional arguments only after `=`, and any unambiguous prefix of a long option
//! (`--recur`). Repeated options are all returned in order, so the caller's last one wins.
//! Errors carry glibc's wording, which scripts and test suites compare.
//!
//! Written here rather than with clap: clap has no argument permutation by these rules, words
//! its errors its own way (and exits 2 where GNU tools exit 1), and takes prefixes only where
//! no other option shares them, where glibc also takes a prefix shared by options that mean the
//! same (`--pa` for `--parents` and its old name `--path`).

use std::ffi::{OsStr, OsString};

/// Whether an option takes an argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HasArg {
    /// Never (`--verbose`).
    No,
    /// Always, after `=` or as the next word (`--suffix=~`, `--suffix ~`).
    Required,
    /// Only after `=` (`--backup`, `--backup=numbered`).
    Optional,
}

/// A long option: its name, whether it takes an argument, what it stands for (`id`: options
/// that mean the same share one, as a short and a long spelling do), and whether it is one of
/// the program's own names (matched by prefix) or an extra one taken only when spelt out.
#[derive(Debug, Clone, Copy)]
pub struct LongOpt {
    /// The name, without the dashes.
    pub name: &'static str,
    /// Whether it takes an argument.
    pub has_arg: HasArg,
    /// What it stands for; the short option's letter where it has one.
    pub id: u32,
    /// Matched by an unambiguous prefix (the peer's own options); `false`: only in full, so
    /// that options the peer lacks never make one of its prefixes ambiguous.
    pub prefix: bool,
}

/// One option as given, with its argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The option's id (the letter of a short option).
    pub id: u32,
    /// Its argument, if it took one.
    pub arg: Option<OsString>,
}

/// A command line that is not valid, worded as glibc words it (without the program name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadOption(pub String);

/// The options and operands of `args` (without the program name): short options from
/// `shorts` (getopt's string: a letter, followed by `:` when it takes an argument) and long
/// ones from `longs`. Stops at the first operand when `POSIXLY_CORRECT` is set.
pub fn parse(args: &[OsString], shorts: &str, longs: &[LongOpt]) -> Result<(Vec<Found>, Vec<OsString>), BadOption> {
    let in_order = std::env::var_os("POSIXLY_CORRECT").is_some();
    let mut found = Vec::new();
    let mut operands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_encoded_bytes();
        i += 1;
        if a == b"--" {
            operands.extend(args[i..].iter().cloned());
            break;
        }
        if a.len() < 2 || a[0] != b'-' {
            operands.push(args[i - 1].clone());
            if in_order {
                operands.extend(args[i..].iter().cloned());
                break;
            }
            continue;
        }
        if let Some(rest) = a.strip_prefix(b"--") {
            let (name, value) = match rest.iter().position(|&b| b == b'=') {
                Some(p) => (&rest[..p], Some(&rest[p + 1..])),
                None => (rest, None),
            };
            let o = long_match(name, rest, longs)?;
            let arg = match (o.has_arg, value) {
                (HasArg::No, Some(_)) => return Err(BadOption(format!("option '--{}' doesn't allow an argument", o.name))),
                (HasArg::No, None) | (HasArg::Optional, None) => None,
                (_, Some(v)) => Some(os(v)),
                (HasArg::Required, None) => match args.get(i) {
                    Some(next) => {
                        i += 1;
                        Some(next.clone())
                    }
                    None => return Err(BadOption(format!("option '--{}' requires an argument", o.name))),
                },
            };
            found.push(Found { id: o.id, arg });
            continue;
        }
        // A bundle of short options; one taking an argument ends it.
        let mut k = 1;
        while k < a.len() {
            let c = a[k];
            k += 1;
            let spec = shorts.as_bytes();
            let at = if c == b':' { None } else { spec.iter().position(|&s| s == c) };
            let Some(at) = at else {
                return Err(BadOption(format!("invalid option -- '{}'", char::from(c))));
            };
            if spec.get(at + 1) != Some(&b':') {
                found.push(Found { id: u32::from(c), arg: None });
                continue;
            }
            let arg = if k < a.len() {
                os(&a[k..])
            } else {
                match args.get(i) {
                    Some(next) => {
                        i += 1;
                        next.clone()
                    }
                    None => return Err(BadOption(format!("option requires an argument -- '{}'", char::from(c)))),
                }
            };
            found.push(Found { id: u32::from(c), arg: Some(arg) });
            break;
        }
    }
    Ok((found, operands))
}

/// The long option `name` (or the one it is a prefix of); `given` is the whole word after the
/// dashes, for the messages.
fn long_match<'a>(name: &[u8], given: &[u8], longs: &'a [LongOpt]) -> Result<&'a LongOpt, BadOption> {
    if let Some(o) = longs.iter().find(|o| o.name.as_bytes() == name) {
        return Ok(o);
    }
    let cands: Vec<&LongOpt> = longs.iter().filter(|o| o.prefix && !name.is_empty() && o.name.as_bytes().starts_with(name)).collect();
    let Some(first) = cands.first() else {
        return Err(BadOption(format!("unrecognized option '--{}'", String::from_utf8_lossy(given))));
    };
    // Options that stand for the same thing (another name of one option) are no ambiguity.
    if cands.iter().all(|o| o.id == first.id && o.has_arg == first.has_arg) {
        return Ok(first);
    }
    let names: Vec<String> = cands.iter().map(|o| format!(" '--{}'", o.name)).collect();
    Err(BadOption(format!("option '--{}' is ambiguous; possibilities:{}", String::from_utf8_lossy(given), names.concat())))
}

fn os(b: &[u8]) -> OsString {
    <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b).to_os_string()
}

/// The one of `choices` that `arg` names: the one it spells, else the only one it is a prefix
/// of (gnulib's `argmatch`, by which GNU tools read an option's word: `--sparse=al`). Names
/// with the same value are one choice. `Err(true)`: ambiguous; `Err(false)`: no such choice.
pub fn argmatch<T: Copy + PartialEq>(arg: &OsStr, choices: &[(&str, T)]) -> Result<T, bool> {
    let a = arg.as_encoded_bytes();
    if let Some((_, v)) = choices.iter().find(|(n, _)| n.as_bytes() == a) {
        return Ok(*v);
    }
    let mut hit: Option<T> = None;
    for (n, v) in choices {
        if !a.is_empty() && n.as_bytes().starts_with(a) {
            match hit {
                Some(h) if h != *v => return Err(true),
                _ => hit = Some(*v),
            }
        }
    }
    hit.ok_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONGS: &[LongOpt] = &[
        LongOpt { name: "parents", has_arg: HasArg::No, id: 1000, prefix: true },
        LongOpt { name: "path", has_arg: HasArg::No, id: 1000, prefix: true },
        LongOpt { name: "recursive", has_arg: HasArg::No, id: b'R' as u32, prefix: true },
        LongOpt { name: "reflink", has_arg: HasArg::Optional, id: 1001, prefix: true },
        LongOpt { name: "remove-destination", has_arg: HasArg::No, id: 1002, prefix: true },
        LongOpt { name: "target-directory", has_arg: HasArg::Required, id: b't' as u32, prefix: true },
        LongOpt { name: "interactive", has_arg: HasArg::No, id: b'i' as u32, prefix: true },
        LongOpt { name: "inplace", has_arg: HasArg::No, id: 1003, prefix: false },
    ];

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn ids(f: &[Found]) -> Vec<(u32, Option<String>)> {
        f.iter().map(|f| (f.id, f.arg.as_ref().map(|a| a.to_string_lossy().into_owned()))).collect()
    }

    #[test]
    fn options_and_operands_mix_bundle_and_take_their_arguments_as_glibc_does() {
        let (f, ops) = parse(&args(&["a", "-Ri", "b", "-tdir", "--recur", "-t", "d2", "--", "-x", "--reflink"]), "iRt:", LONGS).unwrap();
        assert_eq!(
            ids(&f),
            vec![(b'R'.into(), None), (b'i'.into(), None), (b't'.into(), Some("dir".into())), (b'R'.into(), None), (b't'.into(), Some("d2".into()))]
        );
        assert_eq!(ops, args(&["a", "b", "-x", "--reflink"]));
        let (f, _) = parse(&args(&["--reflink", "--reflink=never", "--target-directory", "x", "--target-d=y"]), "", LONGS).unwrap();
        assert_eq!(ids(&f), vec![(1001, None), (1001, Some("never".into())), (b't'.into(), Some("x".into())), (b't'.into(), Some("y".into()))]);
        // A lone dash is an operand.
        assert_eq!(parse(&args(&["-"]), "", LONGS).unwrap().1, args(&["-"]));
        // Two names of one option are no ambiguity; extra options are matched only in full.
        assert_eq!(ids(&parse(&args(&["--pa", "--in", "--inplace"]), "", LONGS).unwrap().0), vec![(1000, None), (b'i'.into(), None), (1003, None)]);
    }

    #[test]
    fn bad_command_lines_are_worded_as_glibc_words_them() {
        let err = |v: &[&str]| parse(&args(v), "iRt:", LONGS).unwrap_err().0;
        assert_eq!(err(&["-z"]), "invalid option -- 'z'");
        assert_eq!(err(&["-t"]), "option requires an argument -- 't'");
        assert_eq!(err(&["--target-directory"]), "option '--target-directory' requires an argument");
        assert_eq!(err(&["--recursive=yes"]), "option '--recursive' doesn't allow an argument");
        assert_eq!(err(&["--nope=1"]), "unrecognized option '--nope=1'");
        assert_eq!(err(&["--re"]), "option '--re' is ambiguous; possibilities: '--recursive' '--reflink' '--remove-destination'");
        assert_eq!(err(&["--inpl"]), "unrecognized option '--inpl'");
    }

    #[test]
    fn words_of_an_option_match_by_prefix_as_argmatch_does() {
        let c = [("never", 0), ("auto", 1), ("always", 2), ("nil", 3), ("none", 3)];
        assert_eq!(argmatch(OsStr::new("al"), &c), Ok(2));
        assert_eq!(argmatch(OsStr::new("a"), &c), Err(true));
        assert_eq!(argmatch(OsStr::new("n"), &c), Err(true));
        assert_eq!(argmatch(OsStr::new("no"), &c), Ok(3));
        assert_eq!(argmatch(OsStr::new("x"), &c), Err(false));
        assert_eq!(argmatch(OsStr::new(""), &c), Err(false));
    }
}
