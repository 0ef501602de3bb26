// Known allocation sequences in Rust (its global allocator is the C allocator): keep_blocks keeps
// 8 MiB, churn_blocks allocates 80 MiB and drops each block at once.
use std::hint::black_box;

#[inline(never)]
fn keep_blocks(kept: &mut Vec<Vec<u8>>, n: usize) {
    for i in 0..n {
        kept.push(black_box(vec![i as u8; 4096]));
    }
}

#[inline(never)]
fn churn_blocks(n: usize) {
    for i in 0..n {
        let block = black_box(vec![i as u8; 4096]);
        drop(block);
    }
}

fn main() {
    let mut kept = Vec::with_capacity(2000);
    keep_blocks(&mut kept, 2000);
    churn_blocks(20000);
    black_box(&kept);
}
