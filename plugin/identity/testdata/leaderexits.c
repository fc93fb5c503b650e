/* A process whose main thread exits while another thread runs: it prints its PID, waits for a line
 * on stdin (the test moves it into its cgroup meanwhile), then the main thread exits and the other
 * one waits for a signal. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static void *wait_for_signal(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, wait_for_signal, NULL) != 0)
        return 1;
    printf("%d\n", (int)getpid());
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    pthread_exit(NULL);
}
