pub mod compare;
pub mod load;
pub mod outputs;
pub mod record;
pub mod report;
pub mod generate;
