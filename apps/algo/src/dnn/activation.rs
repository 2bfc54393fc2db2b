//! The layers' activation functions and their derivatives, both computed from the
//! activation's *outputs* (what the forward pass keeps): ReLU (`max(0, z)`, derivative 1
//! where the output is positive), the logistic function of [`super::kernels`], and the
//! identity (a linear layer). The MLP's hidden layers and the convolution layers share it.

use super::kernels;

/// A layer's activation function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// `max(0, z)`.
    #[default]
    Relu,
    /// `1 / (1 + e^-z)`, as [`kernels::activate`].
    Logistic,
    /// No function: the layer is linear (the calibration times convolutions so).
    Identity,
}

impl Activation {
    /// The name the command line and the reports use: `relu` or `logistic`.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Logistic => "logistic",
            Activation::Identity => "identity",
        }
    }

    /// Applies the function in place.
    pub fn apply(self, y: &mut [f32]) {
        match self {
            Activation::Relu => {
                for v in y {
                    *v = v.max(0.0);
                }
            }
            Activation::Logistic => kernels::activate(y),
            Activation::Identity => {}
        }
    }

    /// `delta ∘ f'` in place, where `out` holds the function's outputs.
    pub fn derive(self, delta: &mut [f32], out: &[f32]) {
        match self {
            Activation::Relu => {
                for (d, &a) in delta.iter_mut().zip(out) {
                    if a <= 0.0 {
                        *d = 0.0;
                    }
                }
            }
            Activation::Logistic => kernels::error_terms(delta, out),
            Activation::Identity => {}
        }
    }
}

impl std::str::FromStr for Activation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "relu" => Ok(Activation::Relu),
            "logistic" | "sigmoid" => Ok(Activation::Logistic),
            _ => Err(format!("'{s}' is neither 'relu' nor 'logistic'")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivatives_match_finite_differences() {
        for act in [Activation::Relu, Activation::Logistic, Activation::Identity] {
            for z in [-1.5f32, -0.2, 0.3, 2.0] {
                let h = 1e-3;
                let (mut lo, mut hi, mut at) = ([z - h], [z + h], [z]);
                act.apply(&mut lo);
                act.apply(&mut hi);
                act.apply(&mut at);
                let mut d = [1.0f32];
                act.derive(&mut d, &at);
                let numeric = (hi[0] - lo[0]) / (2.0 * h);
                assert!(
                    (d[0] - numeric).abs() < 1e-2,
                    "{act:?} at {z}: {d:?} vs {numeric}"
                );
            }
        }
        assert_eq!("relu".parse(), Ok(Activation::Relu));
        assert_eq!("logistic".parse(), Ok(Activation::Logistic));
        assert!("tanh".parse::<Activation>().is_err());
    }
}
