/*
 * The sandbox ("pause") process of every pod on the lab's Kubernetes node: it holds the pod's namespaces
 * open, reaps any zombie that gets re-parented to it (it is PID 1 of the pod when the PID namespace is
 * shared), and exits cleanly on SIGTERM or SIGINT so the runtime can stop the sandbox without a SIGKILL.
 * Built with `gcc -static` so the image needs no libraries.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

/* Nothing to do in the handler itself: its delivery interrupts sigsuspend() and the loop reaps. */
static void on_child(int sig) { (void)sig; }

int main(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
        puts("straggler-lab pause 1.0");
        return 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        perror("pause: sigaction");
        return 1;
    }
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, NULL) != 0) {
        perror("pause: sigaction");
        return 1;
    }
    /* Block the signals we handle and only let them in inside sigsuspend(), so a signal that arrives
     * between the checks below and the wait cannot be lost. */
    sigset_t blocked, waitmask;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGCHLD);
    sigprocmask(SIG_BLOCK, &blocked, &waitmask);
    sigdelset(&waitmask, SIGTERM);
    sigdelset(&waitmask, SIGINT);
    sigdelset(&waitmask, SIGCHLD);
    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        if (stop_signal) {
            return 0;
        }
        sigsuspend(&waitmask);
    }
}
