//! POSIX ACLs as tar archives carry them: the text of pax `SCHILY.acl.access` and
//! `SCHILY.acl.default` (star's format, which GNU tar `--acls` writes: `user::rw-`,
//! `user:NAME:r--`, `group::r-x`, `mask::r-x`, `other::r--`, one entry a line or comma
//! separated), made into the value of the `system.posix_acl_*` extended attribute the kernel
//! takes, as libacl's `acl_from_text` and `acl_set_file` make it.

/// The extended attribute holding a file's access ACL.
pub const ACCESS: &str = "system.posix_acl_access";
/// The extended attribute holding a folder's default ACL.
pub const DEFAULT: &str = "system.posix_acl_default";

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
const UNDEFINED_ID: u32 = u32::MAX;

/// The xattr value of an ACL given as text. `id(group, name)` gives a user's (or, with
/// `group`, a group's) id from its name; a qualifier that is no known name is taken as a
/// number. A star-style fourth field (`user:NAME:rwx:UID`) is used where NAME is unknown. The
/// kernel checks what it is given (the entries each kind needs, a mask where there are named
/// entries); an entry this cannot read is an error naming it.
pub fn from_text(text: &[u8], mut id: impl FnMut(bool, &[u8]) -> Option<u32>) -> Result<Vec<u8>, String> {
    let mut entries: Vec<(u16, u32, u16)> = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        // A comment runs to the end of its line.
        let line = line.split(|&b| b == b'#').next().unwrap_or_default();
        for entry in line.split(|&b| b == b',') {
            let entry = entry.trim_ascii();
            if entry.is_empty() {
                continue;
            }
            let show = || String::from_utf8_lossy(entry).into_owned();
            let fields: Vec<&[u8]> = entry.split(|&b| b == b':').map(<[u8]>::trim_ascii).collect();
            let (tag, qualifier, perms, extra) = match fields[..] {
                [t, q, p] => (t, q, p, None),
                [t, q, p, x] => (t, q, p, Some(x)),
                // `mask:rwx` and `other:r--`: no qualifier field.
                [t, p] if matches!(t, b"m" | b"mask" | b"o" | b"other") => (t, &b""[..], p, None),
                _ => return Err(format!("ACL entry {:?}: not TAG:QUALIFIER:PERMS", show())),
            };
            let group = matches!(tag, b"g" | b"group");
            let (kind, named) = match tag {
                b"u" | b"user" => (USER_OBJ, USER),
                b"g" | b"group" => (GROUP_OBJ, GROUP),
                b"m" | b"mask" => (MASK, MASK),
                b"o" | b"other" => (OTHER, OTHER),
                _ => return Err(format!("ACL entry {:?}: unknown tag", show())),
            };
            let (tag, who) = if qualifier.is_empty() {
                (kind, UNDEFINED_ID)
            } else if kind == MASK || kind == OTHER {
                return Err(format!("ACL entry {:?}: a qualifier where none belongs", show()));
            } else {
                let number = |s: &[u8]| std::str::from_utf8(s).ok().and_then(|s| s.parse::<u32>().ok());
                let who = id(group, qualifier).or_else(|| number(qualifier)).or_else(|| extra.and_then(number));
                (named, who.ok_or_else(|| format!("ACL entry {:?}: no such {}", show(), if group { "group" } else { "user" }))?)
            };
            let mut bits = 0u16;
            for &c in perms {
                bits |= match c {
                    b'r' => 4,
                    b'w' => 2,
                    b'x' => 1,
                    b'-' => 0,
                    _ => return Err(format!("ACL entry {:?}: bad permissions", show())),
                };
            }
            entries.push((tag, who, bits));
        }
    }
    // The kernel takes entries in this order only.
    entries.sort_by_key(|&(tag, who, _)| (tag, who));
    Ok(encode(&entries))
}

/// The ACL that says no more than a mode's permission bits (owner, group, others): set as a
/// file's access ACL, it removes any other and gives the file those bits, as GNU tar `--acls`
/// does for a member the archive gives no ACL.
pub fn from_mode(mode: u32) -> Vec<u8> {
    let bits = |shift: u32| ((mode >> shift) & 7) as u16;
    encode(&[(USER_OBJ, UNDEFINED_ID, bits(6)), (GROUP_OBJ, UNDEFINED_ID, bits(3)), (OTHER, UNDEFINED_ID, bits(0))])
}

/// The text of an ACL given as the value of its `system.posix_acl_*` extended attribute, as
/// GNU tar `--acls` stores it in `SCHILY.acl.access` and `SCHILY.acl.default` (libacl's
/// `acl_to_text`: an entry a line, `user::rw-`, `user:NAME:r--`, `group::r-x`, `mask::rw-`,
/// `other::r--`, in the kernel's order). `name(group, id)` gives a user's (or, with `group`, a
/// group's) name; an id without one is written as its number, as libacl writes it.
pub fn to_text(value: &[u8], mut name: impl FnMut(bool, u32) -> Option<Vec<u8>>) -> Result<Vec<u8>, String> {
    let (head, body) = value.split_at_checked(4).ok_or("an ACL shorter than its header")?;
    if u32::from_le_bytes(head.try_into().map_err(|_| "an ACL header")?) != VERSION {
        return Err("an ACL of an unknown version".into());
    }
    if body.len() % 8 != 0 {
        return Err("an ACL whose entries are cut".into());
    }
    let mut out = Vec::with_capacity(body.len() * 2);
    for e in body.chunks_exact(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]);
        let who = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        let (word, named) = match tag {
            USER_OBJ => ("user", None),
            USER => ("user", Some(false)),
            GROUP_OBJ => ("group", None),
            GROUP => ("group", Some(true)),
            MASK => ("mask", None),
            OTHER => ("other", None),
            _ => return Err(format!("an ACL entry of unknown tag {tag:#x}")),
        };
        out.extend_from_slice(word.as_bytes());
        out.push(b':');
        if let Some(group) = named {
            out.extend(name(group, who).unwrap_or_else(|| who.to_string().into_bytes()));
        }
        out.push(b':');
        for (bit, c) in [(4, b'r'), (2, b'w'), (1, b'x')] {
            out.push(if perm & bit != 0 { c } else { b'-' });
        }
        out.push(b'\n');
    }
    Ok(out)
}

fn encode(entries: &[(u16, u32, u16)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 8 * entries.len());
    out.extend_from_slice(&VERSION.to_le_bytes());
    for &(tag, who, perm) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&who.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    /// Text to value and back: the same entries, in the kernel's order, names where known.
    #[test]
    fn text_round_trips_through_the_value() {
        let ids = |group: bool, n: &[u8]| match (group, n) {
            (false, b"nobody") => Some(65534),
            (true, b"daemon") => Some(1),
            _ => None,
        };
        let names = |group: bool, id: u32| match (group, id) {
            (false, 65534) => Some(b"nobody".to_vec()),
            (true, 1) => Some(b"daemon".to_vec()),
            _ => None,
        };
        let text = b"user::rw-\nuser:4321:rwx\nuser:nobody:r--\ngroup::r--\ngroup:daemon:rw-\nmask::rwx\nother::---\n";
        let value = from_text(text, ids).unwrap();
        assert_eq!(to_text(&value, names).unwrap(), text.to_vec());
        assert_eq!(to_text(&from_mode(0o754), names).unwrap(), b"user::rwx\ngroup::r-x\nother::r--\n".to_vec());
        assert!(to_text(&value[..7], names).is_err());
    }

    use super::*;

    fn names(group: bool, name: &[u8]) -> Option<u32> {
        match (group, name) {
            (false, b"alice") => Some(1000),
            (true, b"staff") => Some(50),
            _ => None,
        }
    }

    fn entries(v: &[u8]) -> Vec<(u16, u16, u32)> {
        assert_eq!(v[..4], 2u32.to_le_bytes());
        v[4..].chunks(8).map(|c| (u16::from_le_bytes([c[0], c[1]]), u16::from_le_bytes([c[2], c[3]]), u32::from_le_bytes([c[4], c[5], c[6], c[7]]))).collect()
    }

    #[test]
    fn gnu_tars_text_becomes_the_kernels_sorted_entries() {
        let text = b"user::rw-\nuser:alice:--x\ngroup::r--\ngroup:staff:rwx\nmask::rwx\nother::r--\n";
        let v = from_text(text, names).unwrap();
        assert_eq!(
            entries(&v),
            [(USER_OBJ, 6, UNDEFINED_ID), (USER, 1, 1000), (GROUP_OBJ, 4, UNDEFINED_ID), (GROUP, 7, 50), (MASK, 7, UNDEFINED_ID), (OTHER, 4, UNDEFINED_ID)]
        );
        // The same ACL written short, comma separated, out of order, with comments and
        // numeric or star-style qualifiers.
        let short = b"o::r--,m::rwx, g:50:rwx\n#effective\nu::rw- # owner\ng::r--,u:bob:--x:1000";
        assert_eq!(from_text(short, names).unwrap(), v);
    }

    #[test]
    fn what_cannot_be_read_is_named() {
        for bad in [&b"user:nobody-here:r--"[..], b"robot::rwx", b"user::rwz", b"mask:x:rwx", b"user"] {
            let e = from_text(bad, names).unwrap_err();
            assert!(e.contains(std::str::from_utf8(bad).unwrap()), "{e}");
        }
    }

    #[test]
    fn a_mode_gives_the_three_entries_it_implies() {
        assert_eq!(entries(&from_mode(0o4751)), [(USER_OBJ, 7, UNDEFINED_ID), (GROUP_OBJ, 5, UNDEFINED_ID), (OTHER, 1, UNDEFINED_ID)]);
    }
}
