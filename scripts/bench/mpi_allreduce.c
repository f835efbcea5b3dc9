/* The OpenMPI side of scripts/bench/allreduce.sh: MPI_Allreduce (float, sum) timed the same way as the
 * lab's ring benchmark: warm-up operations, then for each timed one a barrier and the all-reduce alone.
 * Rank 0 prints one JSON line per size with the median time and the algorithm bandwidth. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int iters = argc > 2 ? atoi(argv[2]) : 20, warmup = argc > 3 ? atoi(argv[3]) : 3;
    char sizes[256];
    strncpy(sizes, argc > 1 ? argv[1] : "4,32,256,1024,16384,65536", sizeof sizes - 1); /* KiB */
    sizes[sizeof sizes - 1] = 0;
    for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
        long kib = atol(tok);
        size_t len = (size_t)kib * 1024 / sizeof(float);
        float *in = malloc(len * sizeof(float)), *out = malloc(len * sizeof(float));
        double *times = malloc(iters * sizeof(double));
        for (int i = 0; i < warmup + iters; i++) {
            for (size_t j = 0; j < len; j++) in[j] = (float)((j + rank) % 7);
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            MPI_Allreduce(in, out, (int)len, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            t = MPI_Wtime() - t;
            float want = 0;
            for (int r = 0; r < world; r++) want += (float)((len - 1 + r) % 7);
            if (out[len - 1] != want) { fprintf(stderr, "wrong sum\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
            if (i >= warmup) times[i - warmup] = t;
        }
        qsort(times, iters, sizeof(double), cmp);
        double median = times[iters / 2];
        if (rank == 0)
            printf("{\"impl\":\"openmpi-tcp\",\"world\":%d,\"kib\":%ld,\"median_s\":%.6f,\"min_s\":%.6f,\"algbw_mb_s\":%.1f}\n",
                   world, kib, median, times[0], (double)kib * 1024 / median / 1e6);
        fflush(stdout);
        free(in); free(out); free(times);
    }
    MPI_Finalize();
    return 0;
}
