/* ic.h -- the initial conditions of the GRAPE-5 test programs (g5_forces.c, g5_groups.c):
 * lines "x y z m" read from a file into arrays grown as needed. */
#ifndef IC_H
#define IC_H

#include <stdio.h>
#include <stdlib.h>

/* The particles of file path into *x, *m (malloc'ed): their number, or -1 when the file
 * cannot be opened. */
static int read_ic(const char *path, double (**x)[3], double **m)
{
    int n = 0, cap = 1024;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    *x = malloc(sizeof **x * cap);
    *m = malloc(sizeof **m * cap);
    while (fscanf(f, "%lf %lf %lf %lf", &(*x)[n][0], &(*x)[n][1], &(*x)[n][2], &(*m)[n]) == 4)
        if (++n == cap) {
            cap *= 2;
            *x = realloc(*x, sizeof **x * cap);
            *m = realloc(*m, sizeof **m * cap);
        }
    fclose(f);
    return n;
}

#endif
