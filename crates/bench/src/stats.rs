//! Small statistics over trial figures: median, min, max and coefficient of variation.

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
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        Spread {
            median: median_sorted(&v),
            min: v[0],
            max: v[v.len() - 1],
        }
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

/// Index of the value closest to the median (the representative run of a set), if any.
pub fn median_index(values: &[f64]) -> Option<usize> {
    let m = median(values);
    values
        .iter()
        .enumerate()
        .min_by(|a, b| (a.1 - m).abs().partial_cmp(&(b.1 - m).abs()).unwrap())
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_median() {
        assert_eq!(Spread::of(&[]), Spread::default());
        assert_eq!(
            Spread::of(&[3.0, 1.0, 2.0]),
            Spread {
                median: 2.0,
                min: 1.0,
                max: 3.0
            }
        );
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
}
