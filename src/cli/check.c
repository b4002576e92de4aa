/* tbmfs --check: validates each SOURCE and reads all its weights, printing
 * every problem and warning (the report, on stdout) and a summary line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tbm/log.h"
#include "tbm/text.h"
#include "tbm/source.h"

/* Prints tensor t's problems or warnings; returns how many. */
static size_t print_messages(const char *source, const struct tbm_model *m, size_t t, bool problems)
{
    size_t n = tbm_model_tensor_message_count(m, t, problems);

    for (size_t i = 0; i < n; i++)
        printf("%s: tensor %s: %s: %s\n", source, tbm_model_tensor_dir(m, t),
               problems ? "problem" : "warning", tbm_model_tensor_message(m, t, problems, i));
    return n;
}

/* --check reads every mask and weight. */
static void check_line(const void *arg, double secs, char *buf, size_t len)
{
    uint64_t done, total;

    tbm_model_stats_progress(arg, &done, &total);
    double rate = secs > 0 ? (double)done / secs : 0;
    snprintf(buf, len, "checking: %.0f of %.0f MiB, %.0f MiB/s, %.0f s left",
             (double)done / 1048576, (double)total / 1048576, rate / 1048576,
             rate > 0 ? (double)(total - (done < total ? done : total)) / rate : 0.0);
}

/* 0, 1 or 2 for one source. */
static int check_one(const char *given, struct tbm_open_options *opts)
{
    struct tbm_model *m;
    char err[1024], source[4096];
    size_t warnings = 0;

    /* every line printed is UTF-8, whatever bytes the path holds, and
     * shows no secret a URL carries */
    char *shown = tbm_source_url_display(given);
    tbm_text_clean(source, sizeof(source), shown ? shown : "?", shown ? strlen(shown) : 1);
    free(shown);
    if (tbm_open_with_progress(given, opts, &m, err, sizeof(err)) < 0) {
        tbm_log(TBM_LOG_ERROR, "%s", err);
        return 2;
    }
    /* --check reads every mask and weight: the statistics' warnings too */
    struct tbm_progress *p = tbm_progress_start(check_line, m);
    int r = tbm_model_compute_stats(m);
    tbm_progress_stop(p);
    if (r < 0) {
        tbm_log(TBM_LOG_ERROR, "%s: %s", source,
                r == TBM_ERR_NOMEM ? "out of memory computing statistics"
                                   : "statistics not computed: the source failed (above)");
        tbm_model_close(m);
        return 2;
    }
    size_t n = tbm_model_tensor_count(m), broken = tbm_model_problem_tensors(m);
    for (size_t i = 0; i < n; i++) {
        print_messages(source, m, i, true);
        warnings += print_messages(source, m, i, false);
    }
    printf("%s: %zu tensor%s, %zu with problems, %zu warning%s\n", source, n, n == 1 ? "" : "s",
           broken, warnings, warnings == 1 ? "" : "s");
    fflush(stdout);
    tbm_model_close(m);
    return broken ? 1 : 0;
}

int tbm_check_run(const struct tbm_cli *cli)
{
    struct tbm_open_options opts = {.remote = cli->remote};
    int worst = 0;

    if (tbm_cli_select_isa(&opts.isa) < 0)
        return 2;
    for (size_t i = 0; i < cli->nsources; i++) {
        int status = check_one(cli->sources[i], &opts);
        worst = status > worst ? status : worst;
    }
    return worst;
}
