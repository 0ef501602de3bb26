// A known hot method in a namespace, for the native sampler's live tests (demangling).

namespace shop {
struct Basket {
    double total = 0;
    __attribute__((noinline)) void add_all(long n) {
        for (long i = 0; i < n; i++) total += (double)i * 0.5 / (1.0 + (double)(i & 7)); // HOT
    }
};
} // namespace shop

int main() {
    shop::Basket b;
    for (int r = 0; r < 2500; r++) b.add_all(200000);
    return b.total > 0 ? 0 : 1;
}
