//! Symbol names as people read them: Rust (legacy and v0) and C++ demangled, Go and C as
//! they are.

/// Demangles a linkage name. Rust names lose their hash; C++ names lose their parameter list
/// (overloads fold together, and names match the knowledge base by prefix); anything else
/// (C, Go's `main.(*T).M`) is returned unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        let plain = d.to_string();
        // Legacy Rust symbols are C++-shaped: only take them as Rust when they carry the hash.
        if name.starts_with("_R") || has_rust_hash(&plain) {
            return format!("{d:#}");
        }
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            let opts = cpp_demangle::DemangleOptions::new().no_params().no_return_type();
            if let Ok(s) = sym.demangle_with_options(&opts) {
                return s;
            }
        }
    }
    name.to_owned()
}

fn has_rust_hash(s: &str) -> bool {
    s.rsplit_once("::h").is_some_and(|(_, h)| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_cpp_and_leaves_c_and_go() {
        assert_eq!(demangle("_ZN4core3fmt5write17h3f9c1c1f0c1e3a2bE"), "core::fmt::write");
        assert_eq!(demangle("_RNvCs1234_7mycrate3hot"), "mycrate::hot");
        assert_eq!(demangle("_ZN3foo3barEi"), "foo::bar");
        assert_eq!(demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"), "std::vector<int, std::allocator<int> >::push_back");
        assert_eq!(demangle("recv"), "recv");
        assert_eq!(demangle("main.(*Client).Do"), "main.(*Client).Do");
    }
}
