// Test helper: runs a command with the io_uring system calls answered by an errno from a
// seccomp filter installed on this process only, as a container runtime's default profile does.
// Usage: no_uring EPERM|ENOSYS -- command args...
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, action)

int main(int argc, char **argv) {
  if (argc < 4 || strcmp(argv[2], "--") != 0) {
    fprintf(stderr, "usage: %s EPERM|ENOSYS -- command...\n", argv[0]);
    return 2;
  }
  unsigned int errnum = strcmp(argv[1], "EPERM") == 0 ? EPERM : ENOSYS;
  unsigned int action = SECCOMP_RET_ERRNO | (errnum & SECCOMP_RET_DATA);
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      DENY(__NR_io_uring_setup),
      DENY(__NR_io_uring_enter),
      DENY(__NR_io_uring_register),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
    perror("seccomp");
    return 1;
  }
  execvp(argv[3], argv + 3);
  perror("execvp");
  return 127;
}
