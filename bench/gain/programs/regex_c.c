/* regex_c: a C log filter compiles its POSIX regular expression again for every input line
 * (regfree + regcomp), then matches the line.
 *
 *   regex_c slow|fixed
 *
 * slow:  regfree/regcomp per line (the culprit line).
 * fixed: compiled once before the loop (the real fix); the matching is the same.
 */
#include <regex.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define LINES 80000
#define PATTERN "^([0-9]{4})-([0-9]{2})-([0-9]{2}) (INFO|WARN|ERROR) req=([a-z]+_[0-9]+) ms=([0-9]+)$"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "slow") != 0 && strcmp(argv[1], "fixed") != 0)) {
        fprintf(stderr, "usage: regex_c slow|fixed\n");
        return 2;
    }
    int slow = strcmp(argv[1], "slow") == 0;
    double deadline = now() + 30;
    static const char *levels[] = {"INFO", "WARN", "ERROR"};
    regex_t re;
    regmatch_t groups[7];
    if (regcomp(&re, PATTERN, REG_EXTENDED) != 0) return 1;
    long matched = 0, total_ms = 0;
    char line[256];
    for (long i = 0; i < LINES; i++) {
        if (i % 1024 == 0 && now() > deadline) break;
        snprintf(line, sizeof line, "2024-%02ld-%02ld %s req=item_%ld ms=%ld", i % 12 + 1, i % 28 + 1, levels[i % 3], i, i % 997);
        if (slow) { regfree(&re); if (regcomp(&re, PATTERN, REG_EXTENDED) != 0) return 1; } /* # CULPRIT */
        if (regexec(&re, line, 7, groups, 0) == 0) {
            matched++;
            for (int k = groups[6].rm_so; k < groups[6].rm_eo; k++) total_ms = total_ms * 10 % 1000003 + (line[k] - '0');
        }
    }
    regfree(&re);
    printf("regex_c %s: %ld matched, %ld\n", argv[1], matched, total_ms);
    return 0;
}
