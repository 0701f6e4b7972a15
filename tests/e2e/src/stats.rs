//! The few numbers the benches compute, one way each.

use std::time::Duration;

/// Milliseconds, as a float.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `q` quantile (0 to 1) by nearest rank on (len - 1), as every bench of the suite reports
/// it; `None` for no values. Sorts `v`.
pub fn percentile(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v.get(i).copied()
}

/// The cores this process may run on (1 if the system will not say).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&mut v, 0.5), Some(51.0));
        assert_eq!(percentile(&mut v, 0.95), Some(95.0));
        assert_eq!(percentile(&mut v, 0.0), Some(1.0));
        assert_eq!(percentile(&mut v, 1.0), Some(100.0));
        assert_eq!(percentile(&mut [], 0.5), None);
        assert_eq!(percentile(&mut [3.0], 0.95), Some(3.0));
        assert_eq!(percentile(&mut [1.0], 1.5), None);
    }
}
