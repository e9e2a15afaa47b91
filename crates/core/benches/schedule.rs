//! One engine pass over a synthetic cluster of 1,000 machines and 10,000 units (half already placed, 1 machine
//! in 20 gone, a mix of constraints): `cargo bench -p fleet-core --features simulate --bench schedule` (`ci/bench` runs it).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use fleet_core::scheduler::simulate::synthetic_snapshot;
use fleet_core::scheduler::{ScheduleInput, plan};

fn one_pass(c: &mut Criterion) {
    let snapshot: ScheduleInput = synthetic_snapshot(1_000, 10_000, 42);
    c.bench_function("plan 1000 machines x 10000 units", |b| b.iter(|| plan(black_box(&snapshot))));
    c.bench_function("snapshot 1000 machines x 10000 units", |b| {
        b.iter(|| synthetic_snapshot(black_box(1_000), black_box(10_000), 42))
    });
}

criterion_group!(benches, one_pass);
criterion_main!(benches);
