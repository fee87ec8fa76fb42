//! The order of the trials within each round: a balanced Latin square (Williams design) over the N kinds of
//! trial compared (our modes, then fio's).
//!
//! Running the kinds in the same order every round makes position and carry-over effects look like mode
//! differences: the trial right after a buffered one (which filled and dropped GiBs of page cache) always
//! pays for it. In a Latin square each kind runs in each position once per N rounds; Williams' construction
//! also balances which kind runs right before which (exactly once per pair over N rounds when N is even,
//! twice over 2N rounds when N is odd, the second square being the first one mirrored). Rows are relabelled
//! so that the first round runs the kinds in the order given. With fewer than N rounds no kind runs twice in
//! the same position.
//!
//! `rotate` in `bench/lib.sh` computes the same orders for the shell scripts.

/// The first row of Williams' square for `n` symbols: 0, 1, n-1, 2, n-2, 3, ...
fn williams_row(n: usize) -> Vec<usize> {
    (0..n)
        .map(|j| {
            if j == 0 {
                0
            } else if j % 2 == 1 {
                j.div_ceil(2)
            } else {
                n - j / 2
            }
        })
        .collect()
}

/// The order in which the `n` kinds run in round `round` (from 0): a permutation of `0..n`. Round 0 is
/// `0, 1, ..., n-1`.
pub fn order(n: usize, round: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let first = williams_row(n);
    // Relabel the symbols so that row 0 is the identity: symbol first[j] becomes j.
    let mut relabel = vec![0; n];
    for (j, &s) in first.iter().enumerate() {
        relabel[s] = j;
    }
    let shift = round % n;
    let mut row: Vec<usize> = first.iter().map(|&s| relabel[(s + shift) % n]).collect();
    if n % 2 == 1 && (round / n) % 2 == 1 {
        row.reverse();
    }
    row
}

/// The 1-based number of the round or position at index `i`, as the reports count them.
pub fn ordinal(i: usize) -> u32 {
    u32::try_from(i + 1).unwrap_or(u32::MAX)
}

/// The orders of rounds `0..rounds`.
pub fn schedule(n: usize, rounds: usize) -> Vec<Vec<usize>> {
    (0..rounds).map(|r| order(n, r)).collect()
}

/// Rounds to run when the user did not say: the smallest multiple of `n` (a full square, every kind in every
/// position equally often) that gives each kind at least 3 trials for its median and spread.
pub fn default_rounds(n: usize) -> u32 {
    let n = n.max(1);
    u32::try_from(3usize.div_ceil(n) * n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_permutation(row: &[usize], n: usize) -> bool {
        let mut seen = vec![false; n];
        row.len() == n && row.iter().all(|&k| k < n && !std::mem::replace(&mut seen[k], true))
    }

    #[test]
    fn every_kind_once_per_position_per_square() {
        for n in 1..=9 {
            for square in 0..3 {
                let rows: Vec<_> = (square * n..(square + 1) * n).map(|r| order(n, r)).collect();
                for row in &rows {
                    assert!(is_permutation(row, n), "n {n}: {row:?}");
                }
                for pos in 0..n {
                    let mut at: Vec<usize> = rows.iter().map(|r| r[pos]).collect();
                    at.sort_unstable();
                    assert_eq!(at, (0..n).collect::<Vec<_>>(), "n {n} square {square} position {pos}");
                }
            }
        }
    }

    #[test]
    fn each_kind_follows_each_other_equally_often() {
        for n in 2..=9 {
            let rounds = if n % 2 == 0 { n } else { 2 * n };
            let mut follows = vec![vec![0; n]; n];
            for row in schedule(n, rounds) {
                for w in row.windows(2) {
                    follows[w[0]][w[1]] += 1;
                }
            }
            for (a, f) in follows.iter().enumerate() {
                for (b, &c) in f.iter().enumerate() {
                    let want = if a == b { 0 } else { rounds / n };
                    assert_eq!(c, want, "n {n}: {b} after {a}");
                }
            }
        }
    }

    #[test]
    fn consecutive_rounds_differ() {
        for n in 2..=9 {
            let s = schedule(n, 4 * n + 1);
            for (r, w) in s.windows(2).enumerate() {
                assert_ne!(w[0], w[1], "n {n}: rounds {r} and {}", r + 1);
            }
        }
    }

    #[test]
    fn first_round_is_the_given_order() {
        for n in 0..=9 {
            assert_eq!(order(n, 0), (0..n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn one_kind_always_runs_alone() {
        assert_eq!(schedule(1, 4), vec![vec![0]; 4]);
    }

    #[test]
    fn two_rounds_of_five_kinds() {
        let s = schedule(5, 2);
        assert_eq!(s[0], [0, 1, 2, 3, 4]);
        // No kind keeps its place, and the kind after 0 (buffered in the default modes) changes.
        assert!(s[0].iter().zip(&s[1]).all(|(a, b)| a != b), "{s:?}");
        let after = |row: &[usize], k| row[row.iter().position(|&x| x == k).unwrap() + 1..].first().copied();
        assert_ne!(after(&s[0], 0), after(&s[1], 0), "{s:?}");
        assert_eq!(s[1], [1, 3, 0, 4, 2]);
    }

    /// bench/lib.sh's `rotate` gives the scripts the same orders.
    #[test]
    fn the_shell_scripts_rotate_the_same_way() {
        let lib = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/lib.sh");
        for n in 1..=7 {
            let rounds = 2 * n + 1;
            let items: Vec<String> = (0..n).map(|k| format!("k{k}")).collect();
            let script = format!("set -eu; source {lib}; for r in $(seq 1 {rounds}); do echo $(rotate $r {}); done", items.join(" "));
            let out = std::process::Command::new("bash").args(["-c", &script]).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let want: Vec<String> = schedule(n, rounds).iter().map(|o| o.iter().map(|&k| items[k].as_str()).collect::<Vec<_>>().join(" ")).collect();
            let got: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
            assert_eq!(got, want, "n {n}");
        }
    }

    #[test]
    fn default_rounds_make_full_squares() {
        assert_eq!(default_rounds(1), 3);
        assert_eq!(default_rounds(2), 4);
        assert_eq!(default_rounds(3), 3);
        assert_eq!(default_rounds(5), 5);
        assert_eq!(default_rounds(7), 7);
        assert_eq!(default_rounds(0), 3);
    }
}
