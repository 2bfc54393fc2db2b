//! The optimizer's search time (section 5.3): the 8-layer ImageNet-22K-like network and the
//! Fashion-MNIST MLP on 20 machines of 16 cores, with the example profile.
//! `cargo bench -p iterstore-perf`; smoke-run with `-- --test`.

use criterion::{criterion_group, criterion_main, Criterion};
use iterstore_perf::{builtin, search, Cluster, Model, Network};

fn bench_search(c: &mut Criterion) {
    let cluster = Cluster {
        machines: 20,
        cores: 16,
    };
    let nets: [(&str, Network); 2] = [
        ("imagenet_like_8_layers", builtin::imagenet_like()),
        ("mlp", builtin::mlp()),
    ];
    let mut group = c.benchmark_group("search_20_machines_16_cores");
    group.sample_size(10);
    for (name, net) in nets {
        let model = Model::new(
            &net,
            &builtin::example_profile(),
            &builtin::fashion_mnist_training(),
        );
        group.bench_function(name, |b| b.iter(|| search(&model, &cluster).unwrap()));
    }
    group.finish();
}

criterion_group!(benches, bench_search);
criterion_main!(benches);
