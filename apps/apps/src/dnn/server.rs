//! The DNN when the parameter servers step the weights ([`DnnConfig::server_rule`]):
//! the store's [`Rule`] for each epoch, its step decayed as the workers' would be. With
//! asynchronous replicas this is Downpour SGD (the shards step each push as it arrives).

use iterstore::Rule;
use iterstore_algo::dnn::{DnnConfig, ServerRule};

/// The store's rule for `params`' server rule in epoch `epoch` (from 0): its step is
/// `learning_rate / (1 + lr_decay · epoch)`; `None` without a server rule.
pub(super) fn server_rule(params: &DnnConfig, epoch: u64) -> Option<Rule> {
    let lr = f64::from(params.learning_rate) / (1.0 + f64::from(params.lr_decay) * epoch as f64);
    Some(match params.server_rule? {
        ServerRule::Sgd => Rule::Sgd { lr },
        ServerRule::Momentum => Rule::Momentum {
            lr,
            momentum: f64::from(params.momentum),
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
