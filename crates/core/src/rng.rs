//! The machines' one source of randomness: seeded, so a seed replays a run of the daemon or the
//! simulator exactly (backoff jitter, the pacer's jitter, cycle ids, the re-check spread). The
//! driver draws the seed once at start and logs it; the simulator takes it from the command line.
//! SplitMix64: tiny, fast, and each generator can split off an independent one for a profile.

/// A seeded generator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float in `[0, 1)`.
    pub fn f64(&mut self) -> f64 {
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A whole number in `[0, n)`; 0 for `n == 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift: unbiased enough for jitter and fault draws.
        ((u128::from(self.u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    /// An independent generator for a part (a profile), drawn from this one.
    pub fn split(&mut self) -> Rng {
        Rng::new(self.u64() ^ 0x5851_F42D_4C95_7F2D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_numbers_and_floats_stay_in_the_unit_interval() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..5).map(|_| a.u64()).collect();
        let ys: Vec<u64> = (0..5).map(|_| b.u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(Rng::new(8).u64(), xs[0]);
        let mut r = Rng::new(1);
        for _ in 0..10_000 {
            let f = r.f64();
            assert!((0.0..1.0).contains(&f));
            assert!(r.below(10) < 10);
        }
    }
}
