//! The DNN when the parameter servers step the weights ([`DnnConfig::server_rule`]):
//! the store's [`Rule`] for each epoch, its step decayed as the workers' would be. With
//! asynchronous replicas this is Downpour SGD (the shards step each push as it arrives).

use iterstore::Rule;
use iterstore_algo::dnn::{DnnConfig, ServerRule};

/// The store's rule for `params`' server rule in epoch `epoch` (from 0): its step is
/// `learning_rate / (1 + lr_decay · epoch)`; `None` without a server rule.
pub(super) fn server_rule(params: &DnnConfig, epoch: u64) -> Option<Rule> {
    let lr = decimal(params.learning_rate) / (1.0 + decimal(params.lr_decay) * epoch as f64);
    Some(match params.server_rule? {
        ServerRule::Sgd => Rule::Sgd { lr },
        ServerRule::Momentum => Rule::Momentum {
            lr,
            momentum: decimal(params.momentum),
        },
        ServerRule::AdaGrad => Rule::AdaGrad {
            lr,
            eps: 1e-8,
            initial: 0.1,
        },
        ServerRule::RmsProp => Rule::RmsProp {
            lr,
            decay: 0.9,
            eps: 1e-8,
        },
        ServerRule::Adam => Rule::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        },
    })
}

/// `x` as the decimal number it was written as (`0.05f32` → `0.05`, not
/// `0.05000000074505806`): the value the user gave, and the rule's text shows it so.
fn decimal(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_carries_the_rate_as_written() {
        let params = DnnConfig {
            learning_rate: 0.05,
            lr_decay: 0.3,
            momentum: 0.0,
            server_rule: Some(ServerRule::AdaGrad),
            ..DnnConfig::default()
        };
        let rule = server_rule(&params, 0).unwrap();
        assert_eq!(
            rule.to_string(),
            "adagrad(lr=0.05, eps=0.00000001, initial=0.1)"
        );
        assert!(server_rule(&DnnConfig::default(), 0).is_none());
    }
}
