/*
 * coll_bench: the Open MPI anchor of hcclwatch's collective benchmarks.
 *
 * Runs one MPI collective over a geometric range of buffer sizes and reports each size the
 * way nccl-tests, hccl_test and `hcclwatch bench` do, so that the two tables can be read
 * side by side:
 *
 *   size_bytes count time_us algbw_GBps busbw_GBps
 *
 * - size_bytes is the whole buffer: the all-reduce/broadcast buffer, the gathered result
 *   of an all-gather, the input of a reduce-scatter, one rank's send buffer of an
 *   all-to-all. Elements are float32 for every operation (count = size_bytes / 4); the
 *   reductions sum them. A size is rounded down to whole floats, and to whole per-rank
 *   blocks for the operations that split the buffer, and printed as rounded.
 * - time_us is the mean time of one call over ITERS timed calls, after WARMUP untimed ones
 *   and a barrier, taken on every rank; the slowest rank's mean is reported.
 * - algbw = size_bytes / time (decimal GB/s); busbw = algbw x the nccl-tests bus factor:
 *   allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n; broadcast 1.
 *
 * After the timed calls every rank checks the last result against the value it must
 * hold (inputs are small integers, so float sums are exact); a wrong element makes the
 * program print the count on stderr and exit with status 1.
 *
 * Build: mpicc -O2 -o coll_bench coll_bench.c
 * Usage: coll_bench OP MIN_BYTES MAX_BYTES FACTOR ITERS [WARMUP]
 *   OP: allreduce | allgather | reduce_scatter | alltoall | broadcast
 *   WARMUP defaults to 2.
 * scripts/anchors/mpi-bench.sh builds it and runs it pinned to TCP on loopback.
 */
#include <mpi.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op_kind { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, ALLTOALL, BROADCAST };

struct op_desc {
    const char *name;
    enum op_kind kind;
};

static const struct op_desc OPS[] = {
    {"allreduce", ALLREDUCE},
    {"allgather", ALLGATHER},
    {"reduce_scatter", REDUCE_SCATTER},
    {"alltoall", ALLTOALL},
    {"broadcast", BROADCAST},
};

/* The nccl-tests factor that turns algorithm bandwidth into bus bandwidth: the share of
 * the buffer each rank's busiest link must carry. */
static double bus_factor(enum op_kind kind, int n)
{
    switch (kind) {
    case ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case BROADCAST:
        return 1.0;
    default:
        return (double)(n - 1) / n;
    }
}

/* Parses an integer argument of at least `min`; exits with a message naming it otherwise. */
static long parse_int(const char *what, const char *text, long min, int rank)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min) {
        if (rank == 0)
            fprintf(stderr, "coll_bench: %s must be an integer >= %ld, got '%s'\n", what, min,
                    text);
        MPI_Finalize();
        exit(2);
    }
    return v;
}

/* One call of the collective on `count` floats in total (per-rank blocks of count / n). */
static void run_once(enum op_kind kind, float *send, float *recv, long count, int n)
{
    int block = (int)(count / n);
    switch (kind) {
    case ALLREDUCE:
        MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case ALLGATHER:
        MPI_Allgather(send, block, MPI_FLOAT, recv, block, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case REDUCE_SCATTER:
        MPI_Reduce_scatter_block(send, recv, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case ALLTOALL:
        MPI_Alltoall(send, block, MPI_FLOAT, recv, block, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case BROADCAST:
        /* Broadcast works in place: rank 0's buffer is the source on every call. */
        MPI_Bcast(send, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        break;
    }
}

/* Every rank contributes rank + 1 in each element, so every expected value is a small
 * integer: n(n+1)/2 for a sum, j + 1 for block j of a gather or all-to-all, 1 (rank 0's
 * value) after a broadcast. Returns the number of elements that differ. */
static long count_wrong(enum op_kind kind, const float *send, const float *recv, long count,
                        int n)
{
    long block = count / n, wrong = 0;
    float sum = (float)n * (float)(n + 1) / 2.0f;
    switch (kind) {
    case ALLREDUCE:
        for (long i = 0; i < count; i++)
            wrong += recv[i] != sum;
        break;
    case REDUCE_SCATTER:
        for (long i = 0; i < block; i++)
            wrong += recv[i] != sum;
        break;
    case ALLGATHER:
    case ALLTOALL:
        for (long i = 0; i < block * n; i++)
            wrong += recv[i] != (float)(i / block + 1);
        break;
    case BROADCAST:
        for (long i = 0; i < count; i++)
            wrong += send[i] != 1.0f;
        break;
    }
    return wrong;
}

static void fill(float *buf, long count, float value)
{
    for (long i = 0; i < count; i++)
        buf[i] = value;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    if (argc != 6 && argc != 7) {
        if (rank == 0)
            fprintf(stderr, "usage: coll_bench OP MIN_BYTES MAX_BYTES FACTOR ITERS [WARMUP]\n"
                            "  OP: allreduce | allgather | reduce_scatter | alltoall | broadcast\n");
        MPI_Finalize();
        return 2;
    }
    const struct op_desc *op = NULL;
    for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
        if (strcmp(argv[1], OPS[i].name) == 0)
            op = &OPS[i];
    if (op == NULL) {
        if (rank == 0)
            fprintf(stderr, "coll_bench: unknown OP '%s'\n", argv[1]);
        MPI_Finalize();
        return 2;
    }
    long lo = parse_int("MIN_BYTES", argv[2], 1, rank);
    long hi = parse_int("MAX_BYTES", argv[3], 1, rank);
    long factor = parse_int("FACTOR", argv[4], 1, rank);
    long iters = parse_int("ITERS", argv[5], 1, rank);
    long warmup = argc == 7 ? parse_int("WARMUP", argv[6], 0, rank) : 2;
    /* A factor of 1 would never leave the first size, unless there is only one. */
    if (hi < lo || (factor < 2 && lo != hi)) {
        if (rank == 0)
            fprintf(stderr, "coll_bench: need MIN_BYTES <= MAX_BYTES, and FACTOR >= 2 unless "
                            "MIN_BYTES == MAX_BYTES\n");
        MPI_Finalize();
        return 2;
    }

    /* Both buffers hold the largest size; an all-gather writes n blocks of size / n. */
    long max_count = hi / (long)sizeof(float);
    float *send = NULL, *recv = NULL;
    size_t bytes = (size_t)(max_count > 0 ? max_count : 1) * sizeof(float);
    if (posix_memalign((void **)&send, 64, bytes) != 0 ||
        posix_memalign((void **)&recv, 64, bytes) != 0) {
        fprintf(stderr, "coll_bench: rank %d cannot allocate 2 x %zu bytes\n", rank, bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    if (rank == 0)
        printf("# coll_bench op=%s ranks=%d iters=%ld warmup=%ld float32\n"
               "# size_bytes count time_us algbw_GBps busbw_GBps\n",
               op->name, n, iters, warmup);
    long total_wrong = 0;
    for (long size = lo; size <= hi; size = (factor < 2) ? hi + 1 : size * factor) {
        long count = size / (long)sizeof(float);
        int blocked = op->kind == ALLGATHER || op->kind == REDUCE_SCATTER || op->kind == ALLTOALL;
        if (count == 0 || (blocked && count / n == 0)) {
            if (rank == 0)
                printf("# %ld bytes skipped: fewer than one float%s\n", size,
                       blocked ? " per rank" : "");
            continue;
        }
        fill(send, count, (float)(rank + 1));
        fill(recv, count, 0.0f);
        for (long w = 0; w < warmup; w++)
            run_once(op->kind, send, recv, count, n);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < iters; i++)
            run_once(op->kind, send, recv, count, n);
        double mean = (MPI_Wtime() - t0) / (double)iters, slowest = 0.0;
        MPI_Reduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

        long wrong = count_wrong(op->kind, send, recv, count, n), all_wrong = 0;
        MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            /* The bytes actually moved: whole floats, and whole per-rank blocks where the
             * operation splits the buffer (as nccl-tests rounds its sizes). */
            long moved = (blocked ? count / n * n : count) * (long)sizeof(float);
            double algbw = (double)moved / slowest / 1e9;
            printf("%ld %ld %.2f %.3f %.3f\n", moved, moved / (long)sizeof(float),
                   slowest * 1e6, algbw,
                   algbw * bus_factor(op->kind, n));
            fflush(stdout);
            if (all_wrong != 0)
                fprintf(stderr, "coll_bench: %s %ld bytes: %ld wrong elements\n", op->name,
                        size, all_wrong);
            total_wrong += all_wrong;
        }
    }
    free(send);
    free(recv);
    MPI_Bcast(&total_wrong, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return total_wrong == 0 ? 0 : 1;
}
