pub mod compare;
pub mod load;
pub mod outputs;
pub mod progress;
pub mod record;
pub mod report;
pub mod top;
pub mod generate;
