//! The DNN as [`App`]: the MLP or the CNN, data-parallel or partitioned as its parameters
//! say.

use std::io::{self, Write};

use iterstore_algo::dnn::{Cnn, DnnConfig, Mlp, Partitioning};
use iterstore_data::{load_fashion_mnist, ImageSet, ImageSpec};

use super::{run_cnn_partitioned_observed, run_partitioned_observed, DnnOutcome};
use crate::{App, AppConfig, AppError, Input, Observer, RunReport};

/// The DNN as [`App`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dnn;

/// The DNN's parameters as [`App`] takes them: which network, its hyper-parameters, and
/// how it is partitioned over model replicas.
#[derive(Debug, Clone, PartialEq)]
pub struct DnnParams {
    /// Train the CNN ([`DnnConfig::cnn`]'s shape) instead of the MLP.
    pub cnn: bool,
    /// The hyper-parameters (and the network's shape).
    pub config: DnnConfig,
    /// The partitioning a plan or the options ask for; `None`: data parallelism.
    pub partitioning: Option<Partitioning>,
}

/// What a DNN run returns: the MLP's outcome or the CNN's.
#[derive(Debug, Clone)]
pub enum DnnRun {
    /// The MLP was trained.
    Mlp(DnnOutcome<Mlp>),
    /// The CNN was trained.
    Cnn(DnnOutcome<Cnn>),
}

impl App for Dnn {
    const NAME: &'static str = "dnn";
    const ABOUT: &'static str =
        "A neural network (an MLP or a CNN) trained by mini-batch SGD (input: labeled images)";
    const INPUT: &'static str = "images";
    type Params = DnnParams;
    type Data = ImageSet;
    type Outcome = DnnRun;

    fn validate(params: &DnnParams) -> Result<(), AppError> {
        Ok(params.config.validate()?)
    }

    fn load(input: &Input, _: &DnnParams) -> Result<ImageSet, AppError> {
        Ok(match input {
            Input::File(path) => load_fashion_mnist(path)?,
            Input::Synthetic(size) => ImageSpec::preset(size)?.generate(),
        })
    }

    fn counts(data: &ImageSet) -> String {
        format!(
            "{} training and {} test images of {} x {} pixels, {} classes",
            data.train.len(),
            data.test.len(),
            data.train.rows,
            data.train.cols,
            data.classes
        )
    }

    fn run(
        cfg: &AppConfig,
        params: &DnnParams,
        data: &ImageSet,
        observer: Observer<'_>,
    ) -> Result<DnnRun, AppError> {
        let asked = params.partitioning.as_ref();
        Ok(if params.cnn {
            DnnRun::Cnn(run_cnn_partitioned_observed(
                cfg,
                &params.config,
                data,
                asked,
                observer,
            )?)
        } else {
            DnnRun::Mlp(run_partitioned_observed(
                cfg,
                &params.config,
                data,
                asked,
                observer,
            )?)
        })
    }

    fn write_output(outcome: &DnnRun, _: &ImageSet, out: &mut dyn Write) -> io::Result<()> {
        match outcome {
            DnnRun::Mlp(o) => o.write_model(out),
            DnnRun::Cnn(o) => o.write_model(out),
        }
    }

    fn into_report(outcome: DnnRun) -> RunReport {
        match outcome {
            DnnRun::Mlp(o) => o.report,
            DnnRun::Cnn(o) => o.report,
        }
    }
}
