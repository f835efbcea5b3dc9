//! The training job: rank and seeder binaries, the ring all-reduce, the SeaweedFS client and the dataset.
