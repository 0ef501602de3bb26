pub mod compare;
pub mod generate;
pub mod janitor;
pub mod load;
pub mod memory;
pub mod record;
pub mod report;
pub mod top;
