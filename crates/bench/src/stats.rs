//! Small statistics over trial figures: median, min, max, coefficient of variation, and whether a mode's
//! figures depend on its position in the round.

use serde::{Deserialize, Serialize};

/// Median, minimum and maximum of a set of figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The median (mean of the two middle values for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; all zero when empty. NaNs are ignored.
    pub fn of(values: &[f64]) -> Spread {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(f64::total_cmp);
        Spread { median: median_sorted(&v), min: v[0], max: v[v.len() - 1] }
    }
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median of `values` (0 when empty).
pub fn median(values: &[f64]) -> f64 {
    Spread::of(values).median
}

/// Coefficient of variation: population standard deviation divided by the mean (0 when the mean is 0 or
/// there are fewer than two values).
pub fn cov(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if mean == 0.0 {
        return 0.0;
    }
    let var = values.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    var.sqrt() / mean
}

/// Index of the value closest to the median (the representative run of a set), if any. NaNs are never
/// chosen; `None` when there are only NaNs.
pub fn median_index(values: &[f64]) -> Option<usize> {
    let m = median(values);
    values.iter().enumerate().filter(|(_, v)| !v.is_nan()).min_by(|a, b| (a.1 - m).abs().total_cmp(&(b.1 - m).abs())).map(|(i, _)| i)
}

/// Dixon's Q at 95 % confidence for 3 to 10 values (Rorabacher 1991): a value whose distance to its
/// nearest neighbour, over the range of all, exceeds this is an outlier. More than 10 values use the
/// value for 10, which is stricter than theirs.
const DIXON_Q95: [f64; 8] = [0.970, 0.829, 0.710, 0.625, 0.568, 0.526, 0.493, 0.466];
/// Below this gap (percent of the median) positions are never said to disagree: trials that vary very
/// little would otherwise flag differences nobody would act on.
const POSITION_MIN_GAP_PCT: f64 = 5.0;

/// A position of the round at which a mode's throughput stood apart from its other positions, beyond the
/// run-to-run noise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PositionEffect {
    /// The position (from 1).
    pub position: u32,
    /// The median of the trials at that position.
    pub median: f64,
    /// The slowest trial at the other positions.
    pub others_min: f64,
    /// The fastest trial at the other positions.
    pub others_max: f64,
    /// Distance from `median` to the nearest of `others_min`/`others_max`, in percent of the median of all
    /// the trials.
    pub gap_pct: f64,
}

/// The median of the values at each position: element `k` is position `k + 1`'s, `None` where no trial
/// ran at that position. `trials` holds `(position from 1, value)`; NaNs are ignored.
pub fn by_position(trials: &[(u32, f64)], positions: usize) -> Vec<Option<f64>> {
    (1..=positions)
        .map(|p| {
            let v: Vec<f64> = at_position(trials, crate::schedule::ordinal(p - 1)).collect();
            (!v.is_empty()).then(|| median(&v))
        })
        .collect()
}

fn at_position(trials: &[(u32, f64)], p: u32) -> impl Iterator<Item = f64> + '_ {
    trials.iter().filter(move |t| t.0 == p && !t.1.is_nan()).map(|t| t.1)
}

/// Whether one position of `trials` (`(position from 1, value)`) stands apart from the others beyond the
/// run-to-run noise, by either of two tests, and by more than 5 % of the median:
/// - with 3 or more positions, Dixon's Q test (95 %) on the per-position medians: the highest or lowest
///   median is an outlier among them;
/// - where positions hold 2 or more trials each, separation: every trial at one position is apart from
///   every trial elsewhere, by more than the widest spread of the trials within any position.
///
/// On iid noise each test fires for at most about 5 % of the modes; a position 30 % slower than the rest,
/// with 3 % noise, is found 9 times in 10 over one round per position of 5 modes.
pub fn position_effect(trials: &[(u32, f64)]) -> Option<PositionEffect> {
    let valid: Vec<(u32, f64)> = trials.iter().copied().filter(|t| !t.1.is_nan()).collect();
    let n = valid.iter().map(|t| t.0).max()? as usize;
    let placed: Vec<(u32, f64)> = by_position(&valid, n).iter().enumerate().filter_map(|(k, m)| m.map(|m| (crate::schedule::ordinal(k), m))).collect();
    let m = median(&valid.iter().map(|t| t.1).collect::<Vec<_>>());
    if placed.len() < 2 || m <= 0.0 {
        return None;
    }
    let effect = |position: u32, med: f64| {
        let others = Spread::of(&valid.iter().filter(|t| t.0 != position).map(|t| t.1).collect::<Vec<_>>());
        let gap = if med < others.min { others.min - med } else { med - others.max };
        PositionEffect { position, median: med, others_min: others.min, others_max: others.max, gap_pct: gap.max(0.0) / m * 100.0 }
    };
    dixon_outlier(&placed, m).or_else(|| separated_position(&valid, &placed, m)).map(|(p, med)| effect(p, med))
}

/// Dixon's Q test on the per-position medians `placed`: the outlying `(position, median)`, if any.
fn dixon_outlier(placed: &[(u32, f64)], m: f64) -> Option<(u32, f64)> {
    if placed.len() < 3 {
        return None;
    }
    let mut v = placed.to_vec();
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    let k = v.len();
    let range = v[k - 1].1 - v[0].1;
    let crit = DIXON_Q95[(k - 3).min(DIXON_Q95.len() - 1)];
    let low = (v[1].1 - v[0].1, v[0]);
    let high = (v[k - 1].1 - v[k - 2].1, v[k - 1]);
    let (gap, at) = if low.0 >= high.0 { low } else { high };
    (range > 0.0 && gap / range > crit && gap / m * 100.0 > POSITION_MIN_GAP_PCT).then_some(at)
}

/// The separation test: a position whose 2 or more trials all lie apart from every other trial, by more
/// than the widest spread within a position (the slowest such position).
fn separated_position(valid: &[(u32, f64)], placed: &[(u32, f64)], m: f64) -> Option<(u32, f64)> {
    let spreads: Vec<Spread> = placed.iter().map(|&(p, _)| Spread::of(&at_position(valid, p).collect::<Vec<_>>())).collect();
    let counts = placed.iter().map(|&(p, _)| at_position(valid, p).count());
    if counts.into_iter().any(|c| c < 2) {
        return None;
    }
    let widest = spreads.iter().map(|s| s.max - s.min).fold(0.0, f64::max);
    // With two positions both stand apart from the other: name the slower, the one a carry-over hurt.
    placed
        .iter()
        .zip(&spreads)
        .filter_map(|(&(p, med), s)| {
            let others: Vec<f64> = valid.iter().filter(|t| t.0 != p).map(|t| t.1).collect();
            let o = Spread::of(&others);
            let gap = (o.min - s.max).max(s.min - o.max);
            (gap > widest && gap / m * 100.0 > POSITION_MIN_GAP_PCT).then_some((p, med))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_median() {
        assert_eq!(Spread::of(&[]), Spread::default());
        assert_eq!(Spread::of(&[3.0, 1.0, 2.0]), Spread { median: 2.0, min: 1.0, max: 3.0 });
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median_index(&[10.0, 30.0, 20.0]), Some(2));
        assert_eq!(median_index(&[]), None);
    }

    #[test]
    fn coefficient_of_variation() {
        assert_eq!(cov(&[5.0]), 0.0);
        assert_eq!(cov(&[2.0, 2.0, 2.0]), 0.0);
        // mean 2, population sd 1
        assert!((cov(&[1.0, 3.0]) - 0.5).abs() < 1e-12);
        assert_eq!(cov(&[0.0, 0.0]), 0.0);
    }

    #[test]
    fn nans_neither_panic_nor_count() {
        let s = Spread::of(&[f64::NAN, 3.0, -f64::NAN, 1.0, 2.0]);
        assert_eq!(s, Spread { median: 2.0, min: 1.0, max: 3.0 });
        assert_eq!(median_index(&[f64::NAN, 10.0, -f64::NAN, 30.0, 20.0]), Some(4));
        assert_eq!(median_index(&[f64::NAN, -f64::NAN]), None);
        assert_eq!(Spread::of(&[f64::NAN]), Spread::default());
        assert_eq!(by_position(&[(1, f64::NAN), (2, 5.0)], 2), [None, Some(5.0)]);
        assert_eq!(position_effect(&[(1, f64::NAN), (2, 1.0), (3, 100.0)]), None);
    }

    #[test]
    fn per_position_medians() {
        let t = [(1, 10.0), (2, 20.0), (1, 30.0), (3, 5.0)];
        assert_eq!(by_position(&t, 4), [Some(20.0), Some(20.0), Some(5.0), None]);
    }

    #[test]
    fn one_slow_position_beyond_noise_is_reported() {
        // The case: the trial after buffered ran 32 % slower, the others within 2 %.
        let t = [(1, 1500.0), (2, 1020.0), (3, 1510.0), (4, 1490.0), (5, 1530.0)];
        let e = position_effect(&t).unwrap();
        assert_eq!((e.position, e.median), (2, 1020.0));
        assert_eq!((e.others_min, e.others_max), (1490.0, 1530.0));
        assert!((e.gap_pct - 470.0 / 1500.0 * 100.0).abs() < 1e-9);
        // A fast outlier counts as well.
        let t = [(1, 1000.0), (2, 1010.0), (3, 990.0), (4, 1400.0), (5, 1005.0)];
        assert_eq!(position_effect(&t).unwrap().position, 4);
    }

    #[test]
    fn positions_within_noise_are_not_reported() {
        // Spread evenly over +-8 %: a large range, but no position stands apart.
        let t = [(1, 920.0), (2, 960.0), (3, 1000.0), (4, 1040.0), (5, 1080.0)];
        assert_eq!(position_effect(&t), None);
        // One position apart, but by less than the floor.
        let t = [(1, 1000.0), (2, 1000.0), (3, 1030.0)];
        assert_eq!(position_effect(&t), None);
        // Too few trials or positions to tell.
        assert_eq!(position_effect(&[(1, 1000.0), (2, 500.0)]), None);
        assert_eq!(position_effect(&[(1, 1000.0), (1, 500.0), (1, 800.0)]), None);
        assert_eq!(position_effect(&[]), None);
        // Two positions whose trials overlap.
        let t = [(1, 1000.0), (2, 900.0), (1, 880.0), (2, 990.0)];
        assert_eq!(position_effect(&t), None);
    }

    #[test]
    fn repeated_positions_use_all_their_trials() {
        // Two squares of 3: position 3 is slow both times. Three medians are too few for Dixon's test at
        // this gap, but the trials separate.
        let t = [(1, 100.0), (2, 101.0), (3, 70.0), (1, 99.0), (2, 100.0), (3, 72.0)];
        let e = position_effect(&t).unwrap();
        assert_eq!((e.position, e.median), (3, 71.0));
        assert_eq!((e.others_min, e.others_max), (99.0, 101.0));
        // Two modes: the second position always follows the other mode and is slower every round.
        let t = [(1, 1500.0), (2, 1000.0), (1, 1480.0), (2, 1020.0)];
        assert_eq!(position_effect(&t).unwrap().position, 2);
        // Separated, but by less than the spread within a position.
        let t = [(1, 1500.0), (2, 1000.0), (1, 1100.0), (2, 500.0)];
        assert_eq!(position_effect(&t), None);
    }
}
