pub mod compare;
pub mod load;
pub mod memory;
pub mod outputs;
pub mod record;
pub mod report;
