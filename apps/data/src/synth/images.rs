//! Synthetic labeled images (DNN input): every class has a planted prototype, and an image
//! of a class is its prototype at a random contrast plus Gaussian pixel noise, so a
//! classifier has something to learn (chance is `1 / classes`) but no image is a copy.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

use super::size_index;
use crate::{ImageSet, Images};

/// How far apart the classes' prototypes are: a prototype is this much of its own pattern
/// and the rest of the background all classes share (pixel intensities in `[0, 1]`).
const CLASS_SHARE: f32 = 0.6;
/// The lowest per-image contrast (drawn uniformly up to 1).
const MIN_CONTRAST: f32 = 0.5;

/// Parameters of [`prototype_images`].
#[derive(Debug, Clone, PartialEq)]
pub struct ImageSpec {
    /// Classes (labels `0..classes`).
    pub classes: usize,
    /// Pixel rows per image.
    pub rows: usize,
    /// Pixel columns per image.
    pub cols: usize,
    /// Training images.
    pub train: usize,
    /// Test images.
    pub test: usize,
    /// Standard deviation of the Gaussian pixel noise (intensities in `[0, 1]`).
    pub noise_std: f32,
    /// Random seed.
    pub seed: u64,
}

impl ImageSpec {
    /// The preset for `size` (one of [`super::SIZES`]), 10 classes, with seed 0:
    ///
    /// | size   | pixels  | train   | test   |
    /// |--------|---------|---------|--------|
    /// | tiny   | 12 × 12 | 1 000   | 200    |
    /// | small  | 28 × 28 | 6 000   | 1 000  |
    /// | medium | 28 × 28 | 20 000  | 2 000  |
    /// | large  | 28 × 28 | 60 000  | 10 000 |
    /// | xlarge | 28 × 28 | 240 000 | 10 000 |
    pub fn preset(size: &str) -> Result<ImageSpec, String> {
        let (side, train, test) = match size_index(size)? {
            0 => (12, 1_000, 200),
            1 => (28, 6_000, 1_000),
            2 => (28, 20_000, 2_000),
            3 => (28, 60_000, 10_000),
            _ => (28, 240_000, 10_000),
        };
        Ok(ImageSpec {
            classes: 10,
            rows: side,
            cols: side,
            train,
            test,
            noise_std: 0.35,
            seed: 0,
        })
    }

    /// Checks that the spec describes a non-empty, well-defined data set.
    pub fn validate(&self) -> Result<(), String> {
        if !(2..=256).contains(&self.classes) {
            return Err(format!("classes {} must be in 2..=256", self.classes));
        }
        if self.rows == 0 || self.cols == 0 || self.train == 0 {
            return Err("rows, cols and train must be positive".into());
        }
        if !(self.noise_std.is_finite() && self.noise_std >= 0.0) {
            return Err(format!(
                "noise_std {} must be finite and >= 0",
                self.noise_std
            ));
        }
        Ok(())
    }

    /// Generates the images; see [`prototype_images`].
    pub fn generate(&self) -> ImageSet {
        prototype_images(self)
    }
}

/// Labeled images drawn from planted class prototypes (see the module docs): train and
/// test images are drawn alike, labels uniformly at random. Pixel `j` of an image of class
/// `c` is `contrast · ((1 − S) · background_j + S · pattern_cj) + N(0, noise_std²)`,
/// clamped to `[0, 1]` and quantised to a byte, where background and patterns are uniform
/// in `[0, 1)` and the class share `S` is 0.6. A pure function of `spec`.
pub fn prototype_images(spec: &ImageSpec) -> ImageSet {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let n = spec.rows * spec.cols;
    let classes = spec.classes.clamp(1, 256);
    let background: Vec<f32> = (0..n).map(|_| rng.gen::<f32>()).collect();
    let prototypes: Vec<Vec<f32>> = (0..classes)
        .map(|_| {
            background
                .iter()
                .map(|b| (1.0 - CLASS_SHARE) * b + CLASS_SHARE * rng.gen::<f32>())
                .collect()
        })
        .collect();
    let noise = if spec.noise_std.is_finite() {
        spec.noise_std.abs()
    } else {
        0.0
    };
    let mut draw = |count: usize| {
        let mut images = Images {
            rows: spec.rows,
            cols: spec.cols,
            pixels: Vec::with_capacity(count * n),
            labels: Vec::with_capacity(count),
        };
        for _ in 0..count {
            let c = rng.gen_range(0..classes);
            let contrast = rng.gen_range(MIN_CONTRAST..=1.0);
            images.labels.push(c as u8);
            for &p in &prototypes[c] {
                let z: f32 = rng.sample(StandardNormal);
                let v = (contrast * p + noise * z).clamp(0.0, 1.0);
                images.pixels.push((v * 255.0).round() as u8);
            }
        }
        images
    };
    let train = draw(spec.train);
    let test = draw(spec.test);
    ImageSet {
        train,
        test,
        classes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_seeded_and_of_the_preset_shape() {
        let spec = ImageSpec::preset("tiny").unwrap();
        let a = spec.generate();
        assert_eq!(a, spec.generate());
        assert_eq!((a.train.len(), a.test.len(), a.classes), (1_000, 200, 10));
        assert_eq!(a.train.pixels_per_image(), 144);
        assert_eq!(a.train.labels.len(), 1_000);
        assert!(a.train.labels.iter().all(|&c| c < 10));
        // Every class is drawn.
        assert!((0..10).all(|c| a.train.labels.contains(&c)));
        let other = ImageSpec { seed: 1, ..spec }.generate();
        assert_ne!(a.train.pixels, other.train.pixels);
    }

    #[test]
    fn the_nearest_class_mean_beats_chance_by_far() {
        // The planted signal is there: classifying test images by the nearest training
        // class mean is far better than chance (and not perfect: there is noise).
        let set = ImageSpec::preset("tiny").unwrap().generate();
        let n = set.train.pixels_per_image();
        let mut sums = vec![vec![0.0f64; n]; 10];
        let mut counts = [0usize; 10];
        for i in 0..set.train.len() {
            let c = usize::from(set.train.labels[i]);
            counts[c] += 1;
            for (s, &p) in sums[c].iter_mut().zip(set.train.image(i)) {
                *s += f64::from(p);
            }
        }
        let nearest = |img: &[u8]| {
            (0..10)
                .min_by(|&a, &b| {
                    let d = |c: usize| -> f64 {
                        sums[c]
                            .iter()
                            .zip(img)
                            .map(|(s, &p)| (s / counts[c] as f64 - f64::from(p)).powi(2))
                            .sum()
                    };
                    d(a).total_cmp(&d(b))
                })
                .unwrap()
        };
        let right = (0..set.test.len())
            .filter(|&i| nearest(set.test.image(i)) == usize::from(set.test.labels[i]))
            .count();
        assert!(
            right * 10 > set.test.len() * 5,
            "{right} of {}",
            set.test.len()
        );
    }
}
