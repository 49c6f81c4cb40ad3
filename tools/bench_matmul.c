/* bench_matmul.c — weight-streaming speed of the matmul kernels against the
 * machine's plain memory-read bandwidth. Not part of the build:
 *
 *   make build/libkakeya.a
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -march=x86-64-v3 -Iengine -Iengine/cpu \
 *       tools/bench_matmul.c build/libkakeya.a -lm -lpthread -o build/bench_matmul
 *   build/bench_matmul [threads]
 *
 * For each weight type, 4096x4096 matrices are cycled through so the
 * working set (>= 320 MB) is well past the last-level cache: what is
 * measured is DRAM streaming, as in decoding a large model. */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "matmul.h"
#include "quant.h"

enum { ROWS = 4096, COLS = 4096 };
static size_t WORKING_SET = 320u << 20;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

struct job {
    uint32_t type;
    uint8_t *w;
    size_t bytes;
    const struct matmul_input *in;
    float *y;
    int64_t r0, r1;
    int n_mats;
    size_t mat_bytes;
    /* plain read loop */
    const uint8_t *p;
    size_t n;
    long long sink;
};

static void *run_matmul(void *arg)
{
    struct job *j = arg;
    for (int m = 0; m < j->n_mats; m++)
        matmul_rows(j->type, j->w + (size_t)m * j->mat_bytes, j->in, j->y,
                    ROWS, j->r0, j->r1);
    return NULL;
}

static void *run_read(void *arg)
{
    struct job *j = arg;
    __m256i a = _mm256_setzero_si256(), b = a;
    for (size_t i = 0; i + 64 <= j->n; i += 64) {
        a = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)(j->p + i)));
        b = _mm256_xor_si256(b, _mm256_loadu_si256((const __m256i *)(j->p + i + 32)));
    }
    j->sink = _mm256_extract_epi64(_mm256_xor_si256(a, b), 0);
    return NULL;
}

static double read_bandwidth(const uint8_t *buf, size_t n, int threads)
{
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[8];
        struct job j[8];
        double t0 = now();
        for (int k = 0; k < threads; k++) {
            j[k] = (struct job){.p = buf + n / threads * k, .n = n / threads};
            pthread_create(&th[k], NULL, run_read, &j[k]);
        }
        for (int k = 0; k < threads; k++)
            pthread_join(th[k], NULL);
        double gbs = (double)n / (now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    return best;
}

static void fill(uint32_t type, uint8_t *w, size_t bytes)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        memcpy(w + i, &s, 8);
    }
    /* finite, small scales so the arithmetic is realistic */
    size_t bb = dtype_info(type)->block_bytes;
    uint16_t h = f32_to_fp16(0.01f);
    for (size_t b = 0; b + bb <= bytes; b += bb) {
        switch (type) {
        case KK_Q8_0: case KK_Q4_0: memcpy(w + b, &h, 2); break;
        case KK_Q4_K: memcpy(w + b, &h, 2); memcpy(w + b + 2, &h, 2); break;
        case KK_F16: w[b + 1] &= 0x3b; break;
        default: break;
        }
    }
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2) /* working set in MB, e.g. 40 to measure in-cache speed */
        WORKING_SET = (size_t)atoi(argv[2]) << 20;
    /* room for one matrix of the largest type (F16) whatever was asked */
    if (WORKING_SET < dtype_row_bytes(KK_F16, COLS) * ROWS)
        WORKING_SET = dtype_row_bytes(KK_F16, COLS) * ROWS;
    const uint32_t types[] = {KK_Q8_0, KK_Q4_0, KK_Q4_K, KK_F16};
    const int tokens[] = {1, 4, 8, 16};
    printf("kernel %s, %d thread(s)\n", matmul_kernel_name(), threads);

    uint8_t *big = aligned_alloc(64, WORKING_SET);
    memset(big, 1, WORKING_SET);
    printf("plain read: %.2f GB/s (1 thread), %.2f GB/s (2 threads)\n",
           read_bandwidth(big, WORKING_SET, 1),
           read_bandwidth(big, WORKING_SET, 2));

    float *x = malloc(sizeof(float) * COLS * 16);
    float *y = malloc(sizeof(float) * ROWS * 16);
    for (int i = 0; i < COLS * 16; i++)
        x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    size_t prep_bytes = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        size_t b = matmul_prepared_bytes(types[ti], COLS, 16);
        prep_bytes = b > prep_bytes ? b : prep_bytes;
    }
    void *prep = malloc(prep_bytes);

    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        uint32_t type = types[ti];
        size_t mat = dtype_row_bytes(type, COLS) * ROWS;
        int n_mats = (int)(WORKING_SET / mat);
        n_mats = n_mats < 1 ? 1 : n_mats;
        fill(type, big, (size_t)n_mats * mat);
        printf("%-5s", dtype_info(type)->name);
        for (size_t ni = 0; ni < sizeof tokens / sizeof tokens[0]; ni++) {
            struct matmul_input in;
            matmul_prepare(type, x, COLS, tokens[ni], prep, &in);
            double best = 1e30;
            for (int rep = 0; rep < 3; rep++) {
                pthread_t th[8];
                struct job j[8];
                double t0 = now();
                for (int k = 0; k < threads; k++) {
                    j[k] = (struct job){
                        .type = type, .w = big, .in = &in, .y = y,
                        .r0 = (int64_t)ROWS * k / threads,
                        .r1 = (int64_t)ROWS * (k + 1) / threads,
                        .n_mats = n_mats, .mat_bytes = mat};
                    pthread_create(&th[k], NULL, run_matmul, &j[k]);
                }
                for (int k = 0; k < threads; k++)
                    pthread_join(th[k], NULL);
                double t = now() - t0;
                best = t < best ? t : best;
            }
            printf("  n=%-2d %6.2f GB/s", tokens[ni],
                   (double)mat * n_mats / best / 1e9);
        }
        printf("\n");
    }
    free(prep);
    free(x);
    free(y);
    free(big);
    return 0;
}
