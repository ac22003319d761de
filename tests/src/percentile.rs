//! The nearest-rank percentile the benchmarks report.

/// The value at fraction `p` (0.0..=1.0) of `values`, which are sorted in place.
pub fn percentile<T: Copy + PartialOrd>(values: &mut [T], p: f64) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[((values.len() - 1) as f64 * p).round() as usize]
}
