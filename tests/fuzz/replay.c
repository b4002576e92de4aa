/* Replays the fuzz target over every file of the directories (or the files)
 * given, so that a build without libFuzzer runs the seed and regression
 * corpora. A missing directory is skipped; no input at all is a failure. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_target.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct stat st;

    if (!f || fstat(fileno(f), &st) < 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        if (f)
            fclose(f);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    uint8_t *data = malloc(size ? size : 1);
    if (!data || fread(data, 1, size, f) != size) {
        fprintf(stderr, "replay: %s: cannot read\n", path);
        free(data);
        fclose(f);
        return -1;
    }
    fclose(f);
    printf("replay: %s (%zu bytes)\n", path, size);
    fflush(stdout);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 0;
}

static int skip_hidden(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

/* Runs every regular file of dirpath in name order; returns how many, or -1. */
static long run_dir(const char *dirpath)
{
    struct dirent **names;
    int n = scandir(dirpath, &names, skip_hidden, alphasort);
    long runs = 0;

    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", dirpath, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dirpath, names[i]->d_name);
        if (runs >= 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode))
            runs = run_file(path) < 0 ? -1 : runs + 1;
        free(names[i]);
    }
    free(names);
    return runs;
}

int main(int argc, char **argv)
{
    long total = 0;
    struct stat st;

    for (int i = 1; i < argc; i++) {
        long runs;
        if (stat(argv[i], &st) < 0) {
            if (errno != ENOENT) {
                fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
                return 1;
            }
            printf("replay: %s does not exist, skipped\n", argv[i]);
            continue;
        }
        runs = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]) < 0 ? -1 : 1;
        if (runs < 0)
            return 1;
        total += runs;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no input to run\n");
        return 1;
    }
    printf("replay: %ld inputs ran\n", total);
    return 0;
}
