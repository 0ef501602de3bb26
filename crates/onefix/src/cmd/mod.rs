pub mod outputs;
pub mod record;
pub mod report;
