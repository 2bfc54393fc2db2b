//! Section 5.3's point: the search is polynomial. An 8-layer network on 20 machines of 16
//! cores, measured (the bound is generous; the time is printed with `--nocapture`).

use std::time::Instant;

use iterstore_perf::{builtin, search, Cluster, Model};

#[test]
fn a_20_machine_8_layer_search_takes_well_under_a_second() {
    let model = Model::new(
        &builtin::imagenet_like(),
        &builtin::example_profile(),
        &builtin::fashion_mnist_training(),
    );
    assert_eq!(model.shapes().len(), 8);
    let start = Instant::now();
    let found = search(
        &model,
        &Cluster {
            machines: 20,
            cores: 16,
        },
    )
    .unwrap();
    let took = start.elapsed();
    println!(
        "20 machines, 16 cores, 8 layers: {} candidates, {} DP runs in {took:?}",
        found.candidates.len(),
        found.dp_runs
    );
    assert!(took.as_secs_f64() < 5.0, "{took:?}");
}
