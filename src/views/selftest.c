/* The self-test files: each N:M tensor multiplied by a fixed pseudo-random
 * matrix with the sparse kernel and with OpenBLAS on the dense expansion,
 * compared and timed. Content is produced when the file is opened. */
#include "internal.h"

#include "base/buf.h"

#include "tbm/text.h"

#include <cblas.h>
#include <float.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Work caps, in elements of the tested rows at the default batch: a tensor's
 * own file tests up to a 4096 x 4096 matrix, the root report a sixteenth of
 * that per tensor so that a whole model reports in seconds. A larger batch
 * shrinks the rows tested in proportion, and X and Y stay under
 * VECTOR_BUDGET floats each. */
#define TENSOR_BUDGET (16u << 20)
#define REPORT_BUDGET (1u << 20)
#define VECTOR_BUDGET (4u << 20)
#define REPEATS       3

struct tbm_selftests {
    /* One self-test at a time: with the caps above it bounds the daemon's
     * memory (about 250 MiB at most, for an fp64 tensor) and keeps the
     * timings of concurrent readers from disturbing each other. */
    pthread_mutex_t lock;
    atomic_bool stopping;
};

int tbm_selftests_init(struct tbm_views *v)
{
    v->selftests = calloc(1, sizeof(*v->selftests));
    if (!v->selftests)
        return TBM_ERR_NOMEM;
    pthread_mutex_init(&v->selftests->lock, NULL);
    return 0;
}

void tbm_selftests_free(struct tbm_views *v)
{
    if (!v->selftests)
        return;
    pthread_mutex_destroy(&v->selftests->lock);
    free(v->selftests);
}

void tbm_views_stop(struct tbm_views *v)
{
    atomic_store(&v->selftests->stopping, true);
}

struct result {
    uint64_t rows, cols, rows_tested, cols_tested;
    uint32_t batch;
    double max_abs_err, tolerance;
    double sparse_seconds, dense_seconds;
    bool pass, skipped;
    char error[256];
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* splitmix64: X is the same for every run, so results are reproducible. */
static void fill_x(float *x, size_t n)
{
    uint64_t s = 0x74626d66u;

    for (size_t i = 0; i < n; i++) {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        x[i] = (float)((double)(z >> 40) / (double)(1u << 24) * 2.0 - 1.0);
    }
}

/* The reported tolerance is the bound at the output that decided pass: when
 * some output fails, the one that fails by most; else the one with the
 * largest error, so that max_abs_err <= tolerance. Only outputs whose bound
 * is finite count: an infinite product has no useful bound. */
static void compare(const float *ys, const float *yd, const float *dense, const float *x,
                    uint64_t rows, uint64_t cols, uint32_t batch, struct result *res)
{
    double err = 0, deciding = NAN, worst_fail = -INFINITY, decider_err = -1;

    for (uint64_t r = 0; r < rows; r++) {
        for (uint32_t b = 0; b < batch; b++) {
            double sum = 0;
            uint64_t terms = 0;
            for (uint64_t c = 0; c < cols; c++) {
                float w = dense[r * cols + c];
                terms += w != 0.0f;
                sum += fabs((double)w * (double)x[c * batch + b]);
            }
            /* Each side's rounding error is at most terms * eps * sum|w x|
             * (Higham's bound for a sum of products, eps = 2^-24); a zero
             * product adds nothing, so only kept non-zero terms count. */
            double tol = 2.0 * (double)terms * (FLT_EPSILON / 2) * sum;
            float a = ys[r * batch + b], d = yd[r * batch + b];
            double e = (isnan(a) && isnan(d)) || a == d ? 0 : fabs((double)a - (double)d);
            if (isnan(e) || e > tol)
                res->pass = false;
            if (!isnan(e) && e > err)
                err = e;
            bool fails = isnan(e) || e > tol;
            if (!isfinite(tol) || isnan(e))
                continue;
            if (fails && e - tol > worst_fail) {
                worst_fail = e - tol;
                deciding = tol;
            } else if (!fails && worst_fail == -INFINITY && e > decider_err) {
                decider_err = e;
                deciding = tol;
            }
        }
    }
    res->max_abs_err = err;
    res->tolerance = deciding;
}

static void dense_product(const float *w, const float *x, uint64_t rows, uint64_t cols,
                          uint32_t batch, float *y)
{
    if (batch == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)rows, (blasint)cols, 1.0f, w,
                    (blasint)cols, x, 1, 0.0f, y, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)rows, (blasint)batch,
                    (blasint)cols, 1.0f, w, (blasint)cols, x, (blasint)batch, 0.0f, y,
                    (blasint)batch);
}

/* Reads the tested rows' weights and mask words into memory. */
static int load_payload(const struct tbm_tensor *t, uint64_t n, void **w, uint8_t **mask)
{
    size_t es = tbm_precision_size(t->hdr.precision);
    uint32_t wb = tbm_mask_word_bytes(t->hdr.nm_m);
    uint64_t groups = n / t->hdr.nm_m + (n % t->hdr.nm_m != 0), mbytes = groups * wb;

    *w = malloc(n * es + 1);
    *mask = malloc(mbytes + 1);
    if (!*w || !*mask)
        return TBM_ERR_NOMEM;
    return tbm_chunk_read(t, 0, n, *w, *mask, NULL);
}

static int run_products(const struct tbm_views *v, const struct tbm_tensor *t, struct result *res)
{
    uint64_t n = res->rows_tested * res->cols_tested;
    uint32_t batch = res->batch;
    struct tbm_nm_matrix *packed = NULL;
    void *w = NULL;
    uint8_t *mask = NULL;
    float *dense = malloc(n * sizeof(float) + 1);
    float *x = malloc(res->cols_tested * batch * sizeof(float) + 1);
    float *ys = malloc(res->rows_tested * batch * sizeof(float) + 1);
    float *yd = malloc(res->rows_tested * batch * sizeof(float) + 1);
    int r = TBM_ERR_NOMEM;

    if (!dense || !x || !ys || !yd)
        goto out;
    if ((r = load_payload(t, n, &w, &mask)) < 0)
        goto out;
    r = TBM_ERR_NOMEM;
    if (tbm_nm_pack(t->hdr.precision, w, mask, t->hdr.nm_m, res->rows_tested, res->cols_tested,
                    &packed) < 0)
        goto out;
    tbm_expand(v->model->isa, t->hdr.precision, w, mask, t->hdr.nm_m, 0, n, dense);
    fill_x(x, res->cols_tested * batch);

    res->sparse_seconds = res->dense_seconds = INFINITY;
    for (int k = 0; k < REPEATS; k++) {
        double t0 = now();
        tbm_spmm(v->model->isa, packed, x, batch, ys);
        double t1 = now();
        dense_product(dense, x, res->rows_tested, res->cols_tested, batch, yd);
        double t2 = now();
        res->sparse_seconds = fmin(res->sparse_seconds, t1 - t0);
        res->dense_seconds = fmin(res->dense_seconds, t2 - t1);
    }
    res->pass = true;
    compare(ys, yd, dense, x, res->rows_tested, res->cols_tested, batch, res);
    r = 0;
out:
    tbm_nm_free(packed);
    free(w);
    free(mask);
    free(dense);
    free(x);
    free(ys);
    free(yd);
    return r;
}

/* Fills res for tensor t as far as it is known without running the
 * products (at mount, too): the result of a tensor that is not tested, or
 * the dimensions to test, at most budget elements' worth of rows. Whether
 * the products are to run. */
static bool selftest_plan(const struct tbm_views *v, const struct tbm_tensor *t, uint64_t budget,
                          struct result *res)
{
    memset(res, 0, sizeof(*res));
    res->batch = v->opts.selftest_batch;
    if (t->problems.count > 0) {
        /* the problem is valid UTF-8 already; the cut keeps it so */
        char line[2048];
        int n = snprintf(line, sizeof(line), "tensor has problems: %s", t->problems.items[0]);
        size_t cut = tbm_utf8_cut(line, n < 0 ? 0 : (size_t)n, sizeof(res->error) - 1);
        memcpy(res->error, line, cut);
        res->error[cut] = '\0';
        return false;
    }
    tbm_matrix_dims(t, &res->rows, &res->cols);
    if (res->batch > TBM_BATCH_DEFAULT)
        budget = budget * TBM_BATCH_DEFAULT / res->batch;
    if (t->hdr.nm_m == 0) {
        res->skipped = true;
        snprintf(res->error, sizeof(res->error), "dense tensor (nm_m = 0): no N:M structure");
        return false;
    }
    if (res->cols == 0) {
        res->skipped = true;
        snprintf(res->error, sizeof(res->error), "tensor has no elements");
        return false;
    }
    /* Whole rows up to the budget; a single row longer than the budget is
     * tested on its first budget elements. Both start at element 0, so the
     * groups stay aligned. */
    res->rows_tested = res->rows;
    res->cols_tested = res->cols;
    if (res->cols > budget) {
        res->rows_tested = 1;
        res->cols_tested = budget;
    } else if (res->rows * res->cols > budget) {
        res->rows_tested = budget / res->cols;
    }
    uint64_t vmax = VECTOR_BUDGET / res->batch;
    if (res->cols_tested > vmax) {
        res->rows_tested = 1;
        res->cols_tested = vmax;
    }
    if (res->rows_tested > vmax)
        res->rows_tested = vmax;
    return true;
}

/* The texts of a failure found while the products run. */
#define ERR_CHANGED "the source changed since the mount: remount to test the new model"
#define ERR_IO      "the source could not be read (it shrank?)"
#define ERR_NOMEM   "out of memory for the products"

/* Fills res for tensor t, testing at most budget elements' worth of rows. */
static int selftest_tensor(const struct tbm_views *v, const struct tbm_tensor *t, uint64_t budget,
                           struct result *res)
{
    if (!selftest_plan(v, t, budget, res))
        return 0;
    pthread_mutex_lock(&v->selftests->lock);
    int r = run_products(v, t, res);
    pthread_mutex_unlock(&v->selftests->lock);
    /* One tensor's failure is its own line in a report, never the report's. */
    if (r == TBM_ERR_CHANGED)
        snprintf(res->error, sizeof(res->error), ERR_CHANGED);
    else if (r == TBM_ERR_IO)
        snprintf(res->error, sizeof(res->error), ERR_IO);
    else if (r == TBM_ERR_TRANSFER || r == TBM_ERR_DENIED || r == TBM_ERR_STOPPED)
        snprintf(res->error, sizeof(res->error), "a transfer from the source failed");
    else if (r < 0)
        snprintf(res->error, sizeof(res->error), ERR_NOMEM);
    res->pass = res->pass && r == 0;
    return 0;
}

/* JSON has no infinity or NaN (json-c would write them as bare words that
 * strict parsers refuse): such a figure is null. */
static struct json_object *finite_json(double v)
{
    return isfinite(v) ? json_object_new_double(v) : NULL;
}

/* What running the products can add to the JSON of the planned result
 * (its dimensions known): five doubles of up to 24 characters for 0 or
 * null, and an error found while they run (one of the ERR_ texts), with its
 * key. */
#define SELFTEST_SLACK 256

static int selftest_doc(const struct tbm_views *v, const struct tbm_tensor *t,
                        const struct result *rp, char **out, size_t *len)
{
    const struct result res = *rp;
    char nm[32];
    int r;

    tbm_tensor_nm(t, nm, sizeof(nm));
    struct json_object *o = json_object_new_object();
    if (!o)
        return TBM_ERR_NOMEM;
    json_object_object_add(o, "name", json_object_new_string_len(t->name, (int)t->name_len));
    json_object_object_add(o, "dir", json_object_new_string(t->dir));
    json_object_object_add(o, "rows", json_object_new_uint64(res.rows));
    json_object_object_add(o, "cols", json_object_new_uint64(res.cols));
    json_object_object_add(o, "rows_tested", json_object_new_uint64(res.rows_tested));
    json_object_object_add(o, "cols_tested", json_object_new_uint64(res.cols_tested));
    json_object_object_add(o, "nm", json_object_new_string(nm));
    json_object_object_add(o, "batch", json_object_new_uint64(res.batch));
    json_object_object_add(o, "kernels", json_object_new_string(tbm_isa_name(v->model->isa)));
    json_object_object_add(o, "blas", json_object_new_string(res.batch == 1 ? "sgemv" : "sgemm"));
    json_object_object_add(o, "max_abs_err", finite_json(res.max_abs_err));
    json_object_object_add(o, "tolerance", finite_json(res.tolerance));
    json_object_object_add(o, "pass", json_object_new_boolean(res.pass));
    json_object_object_add(o, "skipped", json_object_new_boolean(res.skipped));
    json_object_object_add(o, "sparse_seconds", finite_json(res.sparse_seconds));
    json_object_object_add(o, "dense_seconds", finite_json(res.dense_seconds));
    json_object_object_add(o, "speedup", finite_json(res.dense_seconds / res.sparse_seconds));
    if (res.error[0])
        json_object_object_add(o, "error", json_object_new_string(res.error));
    r = tbm_json_dump(o, out, len);
    json_object_put(o);
    return r;
}

/* A tensor's selftest has its size before it runs (tar and rsync trust
 * stat): the JSON of its result as planned, and room for the figures when
 * the products are to run. */
int tbm_selftest_size(const struct tbm_views *v, const struct tbm_row *row, size_t i,
                      uint64_t *size)
{
    struct result plan;
    bool runs = selftest_plan(v, &v->model->tensors[i], TENSOR_BUDGET, &plan);
    char *doc;
    size_t len;
    int r = selftest_doc(v, &v->model->tensors[i], &plan, &doc, &len);

    (void)row;
    if (r < 0)
        return r;
    free(doc);
    *size = len + (runs ? SELFTEST_SLACK : 0);
    return 0;
}

int tbm_selftest_render(const struct tbm_views *v, const struct tbm_row *row, size_t i, char **out,
                        size_t *len)
{
    const struct tbm_tensor *t = &v->model->tensors[i];
    struct result res;
    int r = selftest_tensor(v, t, TENSOR_BUDGET, &res);

    (void)row;
    return r < 0 ? r : selftest_doc(v, t, &res, out, len);
}

#define PASS_FMT                                                                                   \
    "%s %s: %s %llux%llu (tested %llux%llu) batch %u max_abs_err %.3g tolerance %.3g speedup "     \
    "%.2fx"
#define SUMMARY_FMT "selftest: %zu passed, %zu failed, %zu skipped"

/* Speedups print clamped, so that their width is bounded. */
#define SPEEDUP_MAX 99999.99

static size_t max_size(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* The longest line a tensor's result can make, without its newline, known
 * at mount: a tensor that is not tested has its line already; one that is
 * has the dimensions of its pass line, and figures at most as wide as the
 * widest (%.3g of a non-negative double is at most 9 characters), or a
 * failure found while it runs. */
static size_t line_width(const struct tbm_views *v, const struct tbm_tensor *t)
{
    struct result res;
    char nm[32];

    if (!selftest_plan(v, t, REPORT_BUDGET, &res))
        return (size_t)snprintf(NULL, 0, "skip %s: %s", t->dir, res.error);
    tbm_tensor_nm(t, nm, sizeof(nm));
    int pass =
        snprintf(NULL, 0, PASS_FMT, "pass", t->dir, nm, (unsigned long long)res.rows,
                 (unsigned long long)res.cols, (unsigned long long)res.rows_tested,
                 (unsigned long long)res.cols_tested, res.batch, 1.23e-300, 1.23e-300, SPEEDUP_MAX);
    size_t error = max_size(max_size(strlen(ERR_CHANGED), strlen(ERR_IO)), strlen(ERR_NOMEM));

    return max_size(pass < 0 ? 0 : (size_t)pass, strlen("FAIL : ") + strlen(t->dir) + error);
}

/* The summary's counts are at most the tensor count. */
static size_t summary_width(const struct tbm_views *v)
{
    size_t n = v->model->ntensors;
    return (size_t)snprintf(NULL, 0, SUMMARY_FMT, n, n, n);
}

/* Appends a line of at most width bytes (the bound the size at mount
 * counted), then its newline; the report is padded as a whole. A longer
 * line means a bound of ours is wrong: the report is refused, never served
 * cut. */
static int report_bounded(struct tbm_buf *rep, size_t width, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int report_bounded(struct tbm_buf *rep, size_t width, const char *fmt, ...)
{
    size_t before = rep->len;
    va_list ap;

    va_start(ap, fmt);
    tbm_buf_vprintf(rep, fmt, ap);
    va_end(ap);
    size_t n = rep->len - before;
    tbm_buf_add(rep, "\n", 1);
    return n > width ? TBM_ERR_NOMEM : 0;
}

static int report_line(const struct tbm_views *v, struct tbm_buf *rep, const struct tbm_tensor *t,
                       const struct result *res, size_t counts[3])
{
    size_t w = line_width(v, t);
    char nm[32];
    double speedup = res->dense_seconds / res->sparse_seconds;

    tbm_tensor_nm(t, nm, sizeof(nm));
    if (res->skipped) {
        counts[2]++;
        return report_bounded(rep, w, "skip %s: %s", t->dir, res->error);
    }
    if (res->error[0]) {
        counts[1]++;
        return report_bounded(rep, w, "FAIL %s: %s", t->dir, res->error);
    }
    counts[res->pass ? 0 : 1]++;
    return report_bounded(rep, w, PASS_FMT, res->pass ? "pass" : "FAIL", t->dir, nm,
                          (unsigned long long)res->rows, (unsigned long long)res->cols,
                          (unsigned long long)res->rows_tested,
                          (unsigned long long)res->cols_tested, res->batch, res->max_abs_err,
                          res->tolerance, speedup < SPEEDUP_MAX ? speedup : SPEEDUP_MAX);
}

/* The root report's size, fixed at mount: each tensor's line at its widest,
 * and the summary. */
int tbm_selftest_report_size(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                             uint64_t *size)
{
    uint64_t total = summary_width(v) + 1;

    (void)row, (void)t;
    for (size_t i = 0; i < v->model->ntensors; i++)
        total += line_width(v, &v->model->tensors[i]) + 1;
    *size = total;
    return 0;
}

int tbm_selftest_report_render(const struct tbm_views *v, const struct tbm_row *row, size_t t,
                               char **out, size_t *len)
{
    struct tbm_buf rep = TBM_BUF_INIT;
    size_t counts[3] = {0, 0, 0};
    struct result res;
    int r = 0;

    (void)row, (void)t;
    for (size_t i = 0; i < v->model->ntensors && r == 0; i++) {
        const struct tbm_tensor *t = &v->model->tensors[i];
        if (atomic_load(&v->selftests->stopping))
            r = TBM_ERR_STOPPED;
        else if ((r = selftest_tensor(v, t, REPORT_BUDGET, &res)) == 0)
            r = report_line(v, &rep, t, &res, counts);
    }
    if (r == 0)
        r = report_bounded(&rep, summary_width(v), SUMMARY_FMT, counts[0], counts[1], counts[2]);
    if (r < 0) {
        tbm_buf_free(&rep);
        return r;
    }
    return tbm_buf_take(&rep, out, len);
}
