/* mcp.c - MCP servers kept connected and their tools callable. One
 * supervisor thread per server runs its life: start (spawn or nothing for
 * HTTP), initialize, tools/list, then wait for a refresh, a death or the
 * shutdown; a failed server is retried after a delay that doubles from
 * restart_min_s to restart_max_s. stdio servers get a stdout reader (which
 * matches responses to waiting requests by id and answers ping) and a stderr
 * reader (log lines tagged with the server's name). Requests wait on the
 * server's condition with a deadline, so a hung server only ever costs the
 * calls made to it. */
#define _GNU_SOURCE   /* pipe2, execvpe, memmem */
#include "src/mcp/mcp.h"

#include "src/core/omni.h"
#include "src/mcp/mcp_proto.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

enum mcp_status { MCP_STARTING, MCP_CONNECTED, MCP_FAILED };
static const char *const mcp_status_names[] = { "starting", "connected", "failed" };

struct mcp_pending {             /* a request waiting for its response */
    int64_t id;
    bool done;
    cJSON *msg;                  /* the response; NULL with done: the server went away */
    struct mcp_pending *next;
};

struct mcp_server {
    struct mcp *m;
    struct mcp_server_spec *spec;   /* m->cfg's */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;            /* anything below changed */
    enum mcp_status status;         /* {lock} */
    char error[320];                /* {lock} last failure */
    int restarts;                   /* {lock} */
    cJSON *tools;                   /* {lock} tools/list result: array of tool objects */
    char info[192];                 /* {lock} serverInfo name and version */
    bool refresh;                   /* {lock} tools/list_changed came */
    bool dead;                      /* {lock} the stdio child is gone */
    bool reinit;                    /* {lock} HTTP: the session must be set up again */
    struct mcp_pending *pending;    /* {lock} */
    int64_t next_id;                /* {lock} */
    /* stdio: set by the supervisor before the readers start */
    pid_t pid;
    int in_fd, out_fd, err_fd;
    pthread_mutex_t write_lock;     /* one message at a time on in_fd */
    pthread_t out_thread, err_thread;
    bool readers;
    /* http: the GET stream that brings server-initiated notifications */
    pthread_t listen_thread;
    bool listening;
    atomic_bool listen_stop;
    /* http */
    char session[256];              /* {lock} Mcp-Session-Id; "" before */
    bool initialized;               /* {lock} send MCP-Protocol-Version */
};

struct mcp {
    struct mcp_params p;
    struct mcp_config cfg;          /* owned deep copy */
    struct mcp_server *servers;
    int n;
    atomic_bool stopping;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int batches;                    /* {lock} batches still running */
};

struct mcp_params mcp_default_params(void)
{
    return (struct mcp_params){
        .tool_timeout_s = 60,
        .init_timeout_s = 30,
        .max_message_bytes = (size_t)16 << 20,
        .max_result_bytes = (size_t)32 << 10,
        .restart_min_s = 1,
        .restart_max_s = 60,
        .max_calls = 16,
        .client_version = "",
    };
}

static double mcp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits on s->cond until deadline (monotonic seconds); the condition uses
 * the monotonic clock (mcp_server_init). */
static void mcp_wait_until(struct mcp_server *s, double deadline)
{
    struct timespec ts;
    double d = deadline > 1e12 ? 1e12 : deadline;
    ts.tv_sec = (time_t)d;
    ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&s->cond, &s->lock, &ts);
}

// ---- pending requests --------------------------------------------------------------

static struct mcp_pending *mcp_pending_add(struct mcp_server *s)
{
    struct mcp_pending *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_lock(&s->lock);
    p->id = ++s->next_id;
    p->next = s->pending;
    s->pending = p;
    pthread_mutex_unlock(&s->lock);
    return p;
}

static void mcp_pending_remove(struct mcp_server *s, struct mcp_pending *p)
{
    pthread_mutex_lock(&s->lock);
    for (struct mcp_pending **pp = &s->pending; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    pthread_mutex_unlock(&s->lock);
    cJSON_Delete(p->msg);
    free(p);
}

/* Every waiting request fails (the server went away). {lock} held. */
static void mcp_pending_fail_all(struct mcp_server *s)
{
    for (struct mcp_pending *p = s->pending; p; p = p->next)
        p->done = true;
    pthread_cond_broadcast(&s->cond);
}

// ---- stdio transport ------------------------------------------------------------------

/* Writes all of buf to fd by deadline; a server that stops reading its
 * stdin must not block the writer forever. */
static int mcp_write_all(int fd, const char *buf, size_t len, double deadline)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w > 0) {
            buf += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN)
            return -1;
        double left = deadline - mcp_now();
        if (left <= 0)
            return -1;
        struct pollfd pf = { .fd = fd, .events = POLLOUT };
        poll(&pf, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
    }
    return 0;
}

static int mcp_stdio_send(struct mcp_server *s, const char *line, double deadline)
{
    pthread_mutex_lock(&s->write_lock);
    int rc = s->in_fd >= 0 ? mcp_write_all(s->in_fd, line, strlen(line), deadline) : -1;
    if (rc == 0)
        rc = mcp_write_all(s->in_fd, "\n", 1, deadline);
    pthread_mutex_unlock(&s->write_lock);
    return rc;
}

static void mcp_handle_notification(struct mcp_server *s, const cJSON *msg)
{
    const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "method"));
    if (!strcmp(method, "notifications/tools/list_changed")) {
        pthread_mutex_lock(&s->lock);
        s->refresh = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
    } else if (!strcmp(method, "notifications/message")) {
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
        char *d = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(params, "data"));
        OMNI_INFO("mcp %s: %.1000s", s->spec->name, d ? d : "");
        free(d);
    }
}

/* One message from the server (either transport). A response goes to its
 * waiting request (msg is taken: *msg set NULL). */
static void mcp_handle_message(struct mcp_server *s, cJSON **msg)
{
    int64_t id;
    switch (mcp_msg_classify(*msg, &id)) {
    case MCP_MSG_RESPONSE:
        pthread_mutex_lock(&s->lock);
        for (struct mcp_pending *p = s->pending; p; p = p->next)
            if (p->id == id && !p->done) {
                p->msg = *msg;
                *msg = NULL;
                p->done = true;
                pthread_cond_broadcast(&s->cond);
                break;
            }
        pthread_mutex_unlock(&s->lock);
        break;
    case MCP_MSG_REQUEST: {
        /* ping must be answered; this client offers no other capability */
        const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(*msg, "method"));
        bool ping = !strcmp(method, "ping");
        char *r = mcp_msg_response(cJSON_GetObjectItemCaseSensitive(*msg, "id"), ping ? 0 : -32601,
                                   "method not supported by this client");
        if (r && s->spec->transport == MCP_STDIO)
            mcp_stdio_send(s, r, mcp_now() + 5);
        free(r);
        break;
    }
    case MCP_MSG_NOTIFICATION:
        mcp_handle_notification(s, *msg);
        break;
    default:
        OMNI_WARN("mcp %s: ignored a message that is not JSON-RPC 2.0", s->spec->name);
    }
}

/* The stdout reader: newline-delimited JSON-RPC messages. */
static void *mcp_stdout_main(void *arg)
{
    struct mcp_server *s = arg;
    size_t max = s->m->p.max_message_bytes;
    char *buf = NULL, chunk[65536];
    size_t len = 0, cap = 0;
    bool over = false;
    for (;;) {
        ssize_t r = read(s->out_fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        size_t start = 0;
        for (size_t i = 0; i < (size_t)r; i++) {
            if (chunk[i] != '\n')
                continue;
            size_t n = i - start;
            if (len + n <= max && omni_reserve(&buf, &cap, len + n + 1) == 0) {
                memcpy(buf + len, chunk + start, n);
                len += n;
                cJSON *msg = len ? cJSON_ParseWithLength(buf, len) : NULL;
                if (msg)
                    mcp_handle_message(s, &msg);
                else if (len > 0 && strspn(buf, " \t\r") < len)
                    OMNI_WARN("mcp %s: ignored a line of stdout that is not JSON", s->spec->name);
                cJSON_Delete(msg);
            } else {
                over = true;
            }
            len = 0;
            start = i + 1;
            if (over)
                break;
        }
        if (!over && start < (size_t)r) {
            size_t n = (size_t)r - start;
            if (len + n > max || omni_reserve(&buf, &cap, len + n + 1) < 0)
                over = true;
            else {
                memcpy(buf + len, chunk + start, n);
                len += n;
            }
        }
        if (over)
            break;
    }
    free(buf);
    pthread_mutex_lock(&s->lock);
    if (over) {
        /* a message over the limit cannot be skipped safely (its id is
         * unknown and its caller would wait forever): the server restarts */
        snprintf(s->error, sizeof s->error, "sent a message over %zu bytes (--mcp-max-message)",
                 max);
        kill(s->pid, SIGKILL);
    }
    s->dead = true;
    mcp_pending_fail_all(s);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* The stderr reader: each line to the log under the server's name. */
static void *mcp_stderr_main(void *arg)
{
    struct mcp_server *s = arg;
    char line[1024], chunk[4096];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(s->err_fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r; i++) {
            if (chunk[i] == '\n' || len == sizeof line - 1) {
                line[len] = 0;
                if (len)
                    OMNI_INFO("mcp %s (stderr): %s", s->spec->name, line);
                len = 0;
                if (chunk[i] == '\n')
                    continue;
            }
            if (chunk[i] != '\r')
                line[len++] = chunk[i];
        }
    }
    if (len) {
        line[len] = 0;
        OMNI_INFO("mcp %s (stderr): %s", s->spec->name, line);
    }
    return NULL;
}

static void mcp_close(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* fork/exec the server with its stdio on pipes. Everything the child needs
 * is built before fork: after it only async-signal-safe calls. */
static int mcp_spawn(struct mcp_server *s, char *err, size_t errlen)
{
    const struct mcp_server_spec *sp = s->spec;
    int in[2] = { -1, -1 }, out[2] = { -1, -1 }, er[2] = { -1, -1 }, ex[2] = { -1, -1 };
    char **argv = calloc((size_t)sp->n_args + 2, sizeof *argv);
    size_t n_environ = 0;
    while (environ && environ[n_environ])
        n_environ++;
    char **envp = calloc(n_environ + (size_t)sp->n_env + 1, sizeof *envp);
    int rc = -1;
    if (!argv || !envp) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
        goto out;
    }
    argv[0] = sp->command;
    for (int i = 0; i < sp->n_args; i++)
        argv[i + 1] = sp->args[i];
    size_t ne = 0;
    for (size_t i = 0; i < n_environ; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t kl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool over = false;
        for (int k = 0; k < sp->n_env && !over; k++)
            over = !strncmp(sp->env[k], environ[i], kl) && sp->env[k][kl] == '=';
        if (!over)
            envp[ne++] = environ[i];
    }
    for (int k = 0; k < sp->n_env; k++)
        envp[ne++] = sp->env[k];
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0 ||
        pipe2(ex, O_CLOEXEC) < 0) {
        omni_fail(err, errlen, OMNI_ERR_IO, "cannot make pipes: %s", strerror(errno));
        goto out;
    }
    long max_fd = sysconf(_SC_OPEN_MAX);
    if (max_fd < 0 || max_fd > 65536)
        max_fd = 65536;
    pid_t pid = fork();
    if (pid < 0) {
        omni_fail(err, errlen, OMNI_ERR_IO, "cannot fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        /* its own process group, so that stopping it stops what it started;
         * killed with the thread that started it should the server crash */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);   /* the server blocks signals on threads */
        signal(SIGPIPE, SIG_DFL);                /* and ignores SIGPIPE */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(er[1], 2);
        for (int fd = 3; fd < max_fd; fd++)
            if (fd != ex[1])
                close(fd);
        if (sp->cwd && chdir(sp->cwd) < 0) {
            int e = errno;
            (void)!write(ex[1], &e, sizeof e);
            _exit(127);
        }
        execvpe(sp->command, argv, envp);
        int e = errno;
        (void)!write(ex[1], &e, sizeof e);
        _exit(127);
    }
    mcp_close(&in[0]);
    mcp_close(&out[1]);
    mcp_close(&er[1]);
    mcp_close(&ex[1]);
    int child_errno = 0;
    ssize_t r;
    while ((r = read(ex[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {
    }
    if (r == (ssize_t)sizeof child_errno) {
        waitpid(pid, NULL, 0);
        omni_fail(err, errlen, OMNI_ERR_IO, "cannot run '%s'%s%s: %s", sp->command,
                  sp->cwd ? " in " : "", sp->cwd ? sp->cwd : "", strerror(child_errno));
        goto out;
    }
    fcntl(in[1], F_SETFL, fcntl(in[1], F_GETFL) | O_NONBLOCK);
    s->pid = pid;
    s->in_fd = in[1];
    s->out_fd = out[0];
    s->err_fd = er[0];
    in[1] = out[0] = er[0] = -1;
    pthread_mutex_lock(&s->lock);
    s->dead = false;
    pthread_mutex_unlock(&s->lock);
    bool o1 = pthread_create(&s->out_thread, NULL, mcp_stdout_main, s) == 0;
    bool o2 = o1 && pthread_create(&s->err_thread, NULL, mcp_stderr_main, s) == 0;
    s->readers = o2;
    if (!o2) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        if (o1)
            pthread_join(s->out_thread, NULL);
        waitpid(pid, NULL, 0);
        s->pid = 0;
        mcp_close(&s->in_fd);
        mcp_close(&s->out_fd);
        mcp_close(&s->err_fd);
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "cannot start reader threads");
        goto out;
    }
    OMNI_INFO("mcp %s: started '%s' (pid %d)", sp->name, sp->command, (int)pid);
    rc = 0;
out:
    for (int i = 0; i < 2; i++) {
        mcp_close(&in[i]);
        mcp_close(&out[i]);
        mcp_close(&er[i]);
        mcp_close(&ex[i]);
    }
    free(argv);
    free(envp);
    return rc;
}

/* EOF on its stdin, SIGTERM to its group, SIGKILL after 2 s; reaped, the
 * readers joined. why gets how it ended when it was not asked to. */
static void mcp_stdio_stop(struct mcp_server *s, char *why, size_t whylen)
{
    if (!s->pid)
        return;
    pthread_mutex_lock(&s->write_lock);
    mcp_close(&s->in_fd);
    pthread_mutex_unlock(&s->write_lock);
    pthread_mutex_lock(&s->lock);
    bool dead = s->dead;   /* it closed its stdout itself: let it finish exiting */
    pthread_mutex_unlock(&s->lock);
    int status = 0;
    bool exited = false;
    for (int i = 0; i < (dead ? 100 : 1) && !exited; i++) {
        exited = waitpid(s->pid, &status, WNOHANG) == s->pid;
        struct timespec ts = { 0, 5 * 1000 * 1000 };
        if (!exited && dead)
            nanosleep(&ts, NULL);
    }
    if (!exited) {
        kill(-s->pid, SIGTERM);
        kill(s->pid, SIGTERM);
        for (int i = 0; i < 200 && !exited; i++) {
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
            exited = waitpid(s->pid, &status, WNOHANG) == s->pid;
        }
        if (!exited) {
            kill(-s->pid, SIGKILL);
            kill(s->pid, SIGKILL);
            exited = waitpid(s->pid, &status, 0) == s->pid;
        }
        if (!dead)
            why = NULL;   /* we stopped it */
    } else {
        kill(-s->pid, SIGKILL);   /* what it left behind in its group */
    }
    if (why && exited) {
        if (WIFEXITED(status))
            snprintf(why, whylen, "exited with status %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status))
            snprintf(why, whylen, "killed by signal %d", WTERMSIG(status));
    }
    if (s->readers) {
        pthread_join(s->out_thread, NULL);
        pthread_join(s->err_thread, NULL);
        s->readers = false;
    }
    mcp_close(&s->out_fd);
    mcp_close(&s->err_fd);
    s->pid = 0;
}

// ---- HTTP transport ------------------------------------------------------------------

#define MCP_HTTP_DELETE (-2)   /* mcp_http_send's want: the DELETE that ends a session */
#define MCP_HTTP_LISTEN (-3)   /* and the GET stream of server-initiated messages */

struct mcp_http_ctx {
    struct mcp_server *s;
    int64_t want;              /* the id whose response ends the request (-1: none) */
    cJSON *resp;
    bool sse, sse_bad;
    struct mcp_sse sse_p;
    char *body;
    size_t len, cap;
    bool too_big;
    char session[256];
};

static size_t mcp_http_header(char *b, size_t size, size_t n, void *user)
{
    struct mcp_http_ctx *x = user;
    size_t len = size * n;
    if (len > 13 && !strncasecmp(b, "content-type:", 13)) {
        x->sse = memmem(b, len, "text/event-stream", 17) != NULL;
    } else if (len > 15 && !strncasecmp(b, "mcp-session-id:", 15)) {
        const char *v = b + 15;
        size_t vl = len - 15;
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        if (vl < sizeof x->session) {
            memcpy(x->session, v, vl);
            x->session[vl] = 0;
        }
    }
    return len;
}

static void mcp_http_event(void *user, const char *data, size_t len)
{
    struct mcp_http_ctx *x = user;
    cJSON *msg = cJSON_ParseWithLength(data, len);
    if (!msg)
        return;
    int64_t id;
    if (mcp_msg_classify(msg, &id) == MCP_MSG_RESPONSE && id == x->want && !x->resp) {
        x->resp = msg;
        return;
    }
    mcp_handle_message(x->s, &msg);
    cJSON_Delete(msg);
}

static size_t mcp_http_write(char *b, size_t size, size_t n, void *user)
{
    struct mcp_http_ctx *x = user;
    size_t len = size * n;
    if (x->sse) {
        if (mcp_sse_feed(&x->sse_p, b, len, mcp_http_event, x) < 0) {
            x->too_big = true;
            return 0;
        }
        /* the response is in: stop here, even if the server keeps the stream open */
        return x->resp ? 0 : len;
    }
    if (x->len + len > x->s->m->p.max_message_bytes ||
        omni_reserve(&x->body, &x->cap, x->len + len + 1) < 0) {
        x->too_big = true;
        return 0;
    }
    memcpy(x->body + x->len, b, len);
    x->len += len;
    x->body[x->len] = 0;
    return len;
}

static int mcp_http_progress(void *user, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    struct mcp_http_ctx *x = user;
    /* the shutdown aborts transfers, except the DELETE it sends itself */
    if (x->want == MCP_HTTP_LISTEN && atomic_load(&x->s->listen_stop))
        return 1;
    return x->want != MCP_HTTP_DELETE && atomic_load(&x->s->m->stopping) ? 1 : 0;
}

/* POSTs one message (or sends DELETE when body is NULL); *resp gets the
 * response with id want. 0, or -1 with err. */
static int mcp_http_send(struct mcp_server *s, const char *body, int64_t want, double timeout_s,
                         cJSON **resp, char *err, size_t errlen)
{
    *resp = NULL;
    CURL *h = curl_easy_init();
    if (!h)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "cannot make an HTTP handle");
    struct mcp_http_ctx x = { .s = s, .want = want };
    mcp_sse_init(&x.sse_p, s->m->p.max_message_bytes);
    struct curl_slist *hl = NULL;
    char line[320];
    bool had_session;
    pthread_mutex_lock(&s->lock);
    had_session = s->session[0] != 0;
    if (had_session) {
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", s->session);
        hl = curl_slist_append(hl, line);
    }
    if (s->initialized)
        hl = curl_slist_append(hl, "MCP-Protocol-Version: " MCP_PROTOCOL_VERSION);
    pthread_mutex_unlock(&s->lock);
    if (want == MCP_HTTP_LISTEN) {
        hl = curl_slist_append(hl, "Accept: text/event-stream");
    } else {
        hl = curl_slist_append(hl, "Content-Type: application/json");
        hl = curl_slist_append(hl, "Accept: application/json, text/event-stream");
    }
    for (int i = 0; i < s->spec->n_headers; i++)
        hl = curl_slist_append(hl, s->spec->headers[i]);
    long ms = timeout_s > 0 ? (long)(timeout_s * 1000) + 1 : 0;
    curl_easy_setopt(h, CURLOPT_URL, s->spec->url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    } else if (want == MCP_HTTP_LISTEN) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, ms && ms < 10000 ? ms : 10000L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, mcp_http_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mcp_http_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, mcp_http_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    int rc = -1;
    if (x.resp) {
        rc = 0;
    } else if (want == MCP_HTTP_LISTEN) {
        /* the GET stream ended (or the server has none: 405): nothing to fix */
        omni_fail(err, errlen, OMNI_ERR_IO, "HTTP %ld, %s", status, curl_easy_strerror(cc));
    } else if (x.too_big) {
        omni_fail(err, errlen, OMNI_ERR_LIMIT, "the answer is over %zu bytes (--mcp-max-message)",
                  s->m->p.max_message_bytes);
    } else if (cc == CURLE_OPERATION_TIMEDOUT) {
        omni_fail(err, errlen, OMNI_ERR_LIMIT, "no answer within %.0f s", timeout_s);
    } else if (cc != CURLE_OK) {
        omni_fail(err, errlen, OMNI_ERR_IO, "%s", atomic_load(&s->m->stopping)
                                                      ? "the server is shutting down"
                                                      : curl_easy_strerror(cc));
        if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST) {
            pthread_mutex_lock(&s->lock);
            s->reinit = true;   /* the supervisor reconnects, with backoff */
            pthread_cond_broadcast(&s->cond);
            pthread_mutex_unlock(&s->lock);
        }
    } else if (status == 404 && had_session) {
        /* the server forgot the session: initialize again (spec: 404 = expired) */
        omni_fail(err, errlen, OMNI_ERR_IO, "the server ended the session (HTTP 404)");
        pthread_mutex_lock(&s->lock);
        s->reinit = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
    } else if (status < 200 || status >= 300) {
        omni_fail(err, errlen, OMNI_ERR_IO, "HTTP %ld: %.200s", status, x.body ? x.body : "");
    } else if (want < 0) {
        rc = 0;   /* a notification (202 Accepted) or the DELETE */
    } else if (x.body) {
        cJSON *doc = cJSON_ParseWithLength(x.body, x.len);
        cJSON *it = doc && cJSON_IsArray(doc) ? doc->child : doc;
        for (; it; it = cJSON_IsArray(doc) ? it->next : NULL) {
            int64_t id;
            if (!x.resp && mcp_msg_classify(it, &id) == MCP_MSG_RESPONSE && id == want) {
                x.resp = cJSON_Duplicate(it, true);
            } else {
                cJSON *one = cJSON_Duplicate(it, true);
                if (one)
                    mcp_handle_message(s, &one);
                cJSON_Delete(one);
            }
        }
        cJSON_Delete(doc);
        if (x.resp)
            rc = 0;
        else
            omni_fail(err, errlen, OMNI_ERR_FORMAT, "the answer holds no response to request %lld",
                      (long long)want);
    } else {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "empty answer (HTTP %ld)", status);
    }
    if (x.session[0]) {
        pthread_mutex_lock(&s->lock);
        snprintf(s->session, sizeof s->session, "%s", x.session);
        pthread_mutex_unlock(&s->lock);
    }
    *resp = x.resp;
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    mcp_sse_free(&x.sse_p);
    free(x.body);
    return rc;
}

// ---- requests (either transport) -------------------------------------------------------

/* A JSON-RPC request and its result (taken from the response: caller
 * deletes). 0, or -1 with err ("no answer within 60 s", the server's error
 * message, "the server exited"). */
static int mcp_request(struct mcp_server *s, const char *method, const cJSON *params,
                       double timeout_s, cJSON **result, char *err, size_t errlen)
{
    *result = NULL;
    if (atomic_load(&s->m->stopping))
        return omni_fail(err, errlen, OMNI_ERR_IO, "the server is shutting down");
    double deadline = mcp_now() + timeout_s;
    cJSON *resp = NULL;
    int rc = -1;
    if (s->spec->transport == MCP_HTTP) {
        pthread_mutex_lock(&s->lock);
        int64_t id = ++s->next_id;
        pthread_mutex_unlock(&s->lock);
        char *line = mcp_msg_request(id, method, params);
        if (!line)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
        rc = mcp_http_send(s, line, id, timeout_s, &resp, err, errlen);
        free(line);
        if (rc < 0)
            return -1;
    } else {
        struct mcp_pending *p = mcp_pending_add(s);
        char *line = p ? mcp_msg_request(p->id, method, params) : NULL;
        if (!line) {
            if (p)
                mcp_pending_remove(s, p);
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
        }
        if (mcp_stdio_send(s, line, deadline) < 0) {
            free(line);
            mcp_pending_remove(s, p);
            return omni_fail(err, errlen, OMNI_ERR_IO, "cannot write to the server's stdin%s",
                             mcp_now() >= deadline ? " (it does not read it)" : "");
        }
        free(line);
        pthread_mutex_lock(&s->lock);
        while (!p->done && !s->dead && !atomic_load(&s->m->stopping) && mcp_now() < deadline)
            mcp_wait_until(s, deadline);
        bool done = p->done, dead = s->dead;
        resp = p->msg;
        p->msg = NULL;
        int64_t id = p->id;
        pthread_mutex_unlock(&s->lock);
        mcp_pending_remove(s, p);
        if (!resp) {
            if (atomic_load(&s->m->stopping))
                return omni_fail(err, errlen, OMNI_ERR_IO, "the server is shutting down");
            if (done || dead)
                return omni_fail(err, errlen, OMNI_ERR_IO, "the server exited during the request");
            /* tell it to stop working on it (best effort) */
            cJSON *cp = cJSON_CreateObject();
            cJSON_AddNumberToObject(cp, "requestId", (double)id);
            cJSON_AddStringToObject(cp, "reason", "timed out");
            char *c = mcp_msg_request(-1, "notifications/cancelled", cp);
            if (c)
                mcp_stdio_send(s, c, mcp_now() + 1);
            free(c);
            cJSON_Delete(cp);
            return omni_fail(err, errlen, OMNI_ERR_LIMIT, "no answer within %g s", timeout_s);
        }
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(resp, "error");
    if (e) {
        const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"));
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "error %d: %.250s",
                  cJSON_IsNumber(code) ? code->valueint : 0, msg ? msg : "(no message)");
        rc = -1;
    } else {
        *result = cJSON_DetachItemFromObjectCaseSensitive(resp, "result");
        rc = 0;
    }
    cJSON_Delete(resp);
    return rc;
}

static int mcp_notify(struct mcp_server *s, const char *method)
{
    char *line = mcp_msg_request(-1, method, NULL);
    if (!line)
        return -1;
    int rc;
    if (s->spec->transport == MCP_HTTP) {
        cJSON *resp = NULL;
        char err[64];
        rc = mcp_http_send(s, line, -1, s->m->p.init_timeout_s, &resp, err, sizeof err);
        cJSON_Delete(resp);
    } else {
        rc = mcp_stdio_send(s, line, mcp_now() + s->m->p.init_timeout_s);
    }
    free(line);
    return rc;
}

/* initialize + notifications/initialized. */
static int mcp_initialize(struct mcp_server *s, char *err, size_t errlen)
{
    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "protocolVersion", MCP_PROTOCOL_VERSION);
    cJSON_AddObjectToObject(params, "capabilities");
    cJSON *ci = cJSON_AddObjectToObject(params, "clientInfo");
    cJSON_AddStringToObject(ci, "name", "omniserve");
    cJSON_AddStringToObject(ci, "version", s->m->p.client_version ? s->m->p.client_version : "");
    cJSON *result = NULL;
    pthread_mutex_lock(&s->lock);
    s->session[0] = 0;
    s->initialized = false;
    pthread_mutex_unlock(&s->lock);
    int rc = mcp_request(s, "initialize", params, s->m->p.init_timeout_s, &result, err, errlen);
    cJSON_Delete(params);
    if (rc < 0)
        return -1;
    const char *pv = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, "protocolVersion"));
    const cJSON *si = cJSON_GetObjectItemCaseSensitive(result, "serverInfo");
    const char *sn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(si, "name"));
    const char *sv = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(si, "version"));
    if (!pv) {
        cJSON_Delete(result);
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "initialize: no protocolVersion in the answer");
    }
    /* Older revisions answer with their own version; tools work the same in
     * 2024-11-05 and 2025-03-26, so take those too. */
    if (strcmp(pv, MCP_PROTOCOL_VERSION) != 0 && strcmp(pv, "2025-03-26") != 0 &&
        strcmp(pv, "2024-11-05") != 0) {
        omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                  "initialize: the server speaks MCP %.40s; this client speaks %s", pv,
                  MCP_PROTOCOL_VERSION);
        cJSON_Delete(result);
        return -1;
    }
    pthread_mutex_lock(&s->lock);
    snprintf(s->info, sizeof s->info, "%.120s%s%.60s", sn ? sn : "", sv ? " " : "", sv ? sv : "");
    s->initialized = true;
    pthread_mutex_unlock(&s->lock);
    cJSON_Delete(result);
    if (mcp_notify(s, "notifications/initialized") < 0)
        return omni_fail(err, errlen, OMNI_ERR_IO, "cannot send notifications/initialized");
    return 0;
}

#define MCP_MAX_TOOLS 1024   /* per server */
#define MCP_MAX_PAGES 64

/* tools/list, every page (nextCursor), into s->tools. */
static int mcp_list_tools(struct mcp_server *s, char *err, size_t errlen)
{
    cJSON *all = cJSON_CreateArray();
    char *cursor = NULL;
    int rc = -1;
    for (int page = 0; page < MCP_MAX_PAGES; page++) {
        cJSON *params = cJSON_CreateObject();
        if (cursor)
            cJSON_AddStringToObject(params, "cursor", cursor);
        cJSON *result = NULL;
        int r = mcp_request(s, "tools/list", params, s->m->p.init_timeout_s, &result, err, errlen);
        cJSON_Delete(params);
        free(cursor);
        cursor = NULL;
        if (r < 0)
            goto out;
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(result, "tools");
        const cJSON *t, *list = cJSON_IsArray(tools) ? tools : NULL;
        cJSON_ArrayForEach(t, list) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "name"));
            if (!name || !*name || strlen(name) > 128) {
                OMNI_WARN("mcp %s: tools/list: skipped a tool without a usable name", s->spec->name);
                continue;
            }
            if (cJSON_GetArraySize(all) >= MCP_MAX_TOOLS) {
                OMNI_WARN("mcp %s: more than %d tools; the rest are left out", s->spec->name,
                          MCP_MAX_TOOLS);
                break;
            }
            cJSON_AddItemToArray(all, cJSON_Duplicate(t, true));
        }
        const char *next = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, "nextCursor"));
        if (next && *next)
            cursor = strdup(next);
        cJSON_Delete(result);
        if (!cursor)
            break;
    }
    free(cursor);
    pthread_mutex_lock(&s->lock);
    cJSON_Delete(s->tools);
    s->tools = all;
    all = NULL;
    int n = cJSON_GetArraySize(s->tools);
    pthread_mutex_unlock(&s->lock);
    OMNI_INFO("mcp %s: %d tools", s->spec->name, n);
    rc = 0;
out:
    cJSON_Delete(all);
    return rc;
}

// ---- the supervisor --------------------------------------------------------------------

static void mcp_set_status(struct mcp_server *s, enum mcp_status st)
{
    pthread_mutex_lock(&s->lock);
    s->status = st;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&s->m->lock);
    pthread_cond_broadcast(&s->m->cond);   /* mcp_wait_ready */
    pthread_mutex_unlock(&s->m->lock);
}

/* The optional GET stream of a Streamable-HTTP server: notifications such
 * as tools/list_changed arrive on it. One try per connection: a server
 * without one answers 405. */
static void *mcp_listen_main(void *arg)
{
    struct mcp_server *s = arg;
    cJSON *resp = NULL;
    char err[160];
    mcp_http_send(s, NULL, MCP_HTTP_LISTEN, 0, &resp, err, sizeof err);
    cJSON_Delete(resp);
    return NULL;
}

/* err[n] = prefix + err, cut to fit */
static void err_prefix(char *err, size_t n, const char *prefix)
{
    size_t k = strlen(prefix), len = strnlen(err, n - 1);
    if (k >= n)
        k = n - 1;
    if (len > n - 1 - k)
        len = n - 1 - k;
    memmove(err + k, err, len);
    memcpy(err, prefix, k);
    err[k + len] = 0;
}

static void *mcp_supervisor_main(void *arg)
{
    struct mcp_server *s = arg;
    struct mcp *m = s->m;
    int fails = 0;
    bool first = true;
    while (!atomic_load(&m->stopping)) {
        char err[320] = "";
        if (!first) {
            pthread_mutex_lock(&s->lock);
            s->restarts++;
            pthread_mutex_unlock(&s->lock);
        }
        first = false;
        mcp_set_status(s, MCP_STARTING);
        pthread_mutex_lock(&s->lock);
        s->refresh = s->reinit = false;
        pthread_mutex_unlock(&s->lock);
        int rc = s->spec->transport == MCP_STDIO ? mcp_spawn(s, err, sizeof err) : 0;
        if (rc == 0 && mcp_initialize(s, err, sizeof err) < 0) {
            rc = -1;
            err_prefix(err, sizeof err, "initialize: ");
        }
        if (rc == 0 && mcp_list_tools(s, err, sizeof err) < 0) {
            rc = -1;
            err_prefix(err, sizeof err, "tools/list: ");
        }
        double up_since = mcp_now();
        if (rc == 0) {
            pthread_mutex_lock(&s->lock);
            s->error[0] = 0;
            pthread_mutex_unlock(&s->lock);
            mcp_set_status(s, MCP_CONNECTED);
            OMNI_INFO("mcp %s: connected (%s)", s->spec->name, s->info);
            if (s->spec->transport == MCP_HTTP) {
                atomic_store(&s->listen_stop, false);
                s->listening = pthread_create(&s->listen_thread, NULL, mcp_listen_main, s) == 0;
            }
            for (;;) {
                pthread_mutex_lock(&s->lock);
                while (!atomic_load(&m->stopping) && !s->dead && !s->refresh && !s->reinit)
                    pthread_cond_wait(&s->cond, &s->lock);
                bool refresh = s->refresh && !s->dead && !s->reinit;
                s->refresh = false;
                pthread_mutex_unlock(&s->lock);
                if (!refresh || atomic_load(&m->stopping))
                    break;
                char e2[320];
                if (mcp_list_tools(s, e2, sizeof e2) < 0)
                    OMNI_WARN("mcp %s: tools/list after list_changed: %s", s->spec->name, e2);
            }
            if (s->listening) {   /* its transfer sees listen_stop within about a second */
                atomic_store(&s->listen_stop, true);
                pthread_join(s->listen_thread, NULL);
                s->listening = false;
            }
            pthread_mutex_lock(&s->lock);
            if (s->error[0])
                snprintf(err, sizeof err, "%s", s->error);
            else if (s->reinit)
                snprintf(err, sizeof err, "the HTTP session was lost");
            pthread_mutex_unlock(&s->lock);
        }
        char why[128] = "";
        if (s->spec->transport == MCP_STDIO)
            mcp_stdio_stop(s, why, sizeof why);
        if (atomic_load(&m->stopping))
            break;
        if (!err[0])
            snprintf(err, sizeof err, "%s", why[0] ? why : "the server went away");
        else if (why[0] && strlen(err) + strlen(why) + 3 < sizeof err)
            snprintf(err + strlen(err), sizeof err - strlen(err), " (%s)", why);
        /* a server that ran a while before failing starts the backoff over */
        if (rc == 0 && mcp_now() - up_since >= 30)
            fails = 0;
        fails++;
        double delay = m->p.restart_min_s;
        for (int i = 1; i < fails && delay < m->p.restart_max_s; i++)
            delay *= 2;
        if (delay > m->p.restart_max_s)
            delay = m->p.restart_max_s;
        pthread_mutex_lock(&s->lock);
        snprintf(s->error, sizeof s->error, "%s", err);
        s->dead = false;
        pthread_mutex_unlock(&s->lock);
        mcp_set_status(s, MCP_FAILED);
        OMNI_WARN("mcp %s: %s; retrying in %.1f s", s->spec->name, err, delay);
        double until = mcp_now() + delay;
        pthread_mutex_lock(&s->lock);
        while (!atomic_load(&m->stopping) && mcp_now() < until)
            mcp_wait_until(s, until);
        pthread_mutex_unlock(&s->lock);
    }
    if (s->spec->transport == MCP_HTTP) {
        pthread_mutex_lock(&s->lock);
        bool sess = s->session[0] != 0;
        pthread_mutex_unlock(&s->lock);
        if (sess) {   /* end the session (spec: the client SHOULD send DELETE) */
            cJSON *resp = NULL;
            char err[64];
            mcp_http_send(s, NULL, MCP_HTTP_DELETE, 2, &resp, err, sizeof err);
            cJSON_Delete(resp);
        }
    }
    return NULL;
}

// ---- lifetime -----------------------------------------------------------------------------

static char *mcp_dup(const char *s) { return s ? strdup(s) : NULL; }

static char **mcp_dup_list(char **l, int n)
{
    char **o = calloc((size_t)n + 1, sizeof *o);
    for (int i = 0; o && i < n; i++)
        o[i] = strdup(l[i]);
    return o;
}

static int mcp_copy_config(struct mcp_config *dst, const struct mcp_config *src)
{
    if (!(dst->servers = calloc((size_t)src->n_servers + 1, sizeof *dst->servers)))
        return -1;
    dst->n_servers = src->n_servers;
    for (int i = 0; i < src->n_servers; i++) {
        const struct mcp_server_spec *a = &src->servers[i];
        struct mcp_server_spec *b = &dst->servers[i];
        b->transport = a->transport;
        b->name = mcp_dup(a->name);
        b->command = mcp_dup(a->command);
        b->cwd = mcp_dup(a->cwd);
        b->url = mcp_dup(a->url);
        b->args = mcp_dup_list(a->args, a->n_args);
        b->n_args = a->n_args;
        b->env = mcp_dup_list(a->env, a->n_env);
        b->n_env = a->n_env;
        b->headers = mcp_dup_list(a->headers, a->n_headers);
        b->n_headers = a->n_headers;
        if (!b->name || (a->command && !b->command) || (a->url && !b->url) || !b->args ||
            !b->env || !b->headers)
            return -1;
    }
    return 0;
}

static void mcp_curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

struct mcp *mcp_new(const struct mcp_config *cfg, const struct mcp_params *p, char *err,
                    size_t errlen)
{
    static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
    pthread_once(&curl_once, mcp_curl_init);
    struct mcp *m = calloc(1, sizeof *m);
    if (!m) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "mcp: out of memory");
        return NULL;
    }
    m->p = *p;
    pthread_mutex_init(&m->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cond, &ca);
    if (mcp_copy_config(&m->cfg, cfg) < 0 ||
        !(m->servers = calloc((size_t)cfg->n_servers + 1, sizeof *m->servers))) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "mcp: out of memory");
        goto fail;
    }
    for (int i = 0; i < cfg->n_servers; i++) {
        struct mcp_server *s = &m->servers[i];
        s->m = m;
        s->spec = &m->cfg.servers[i];
        s->in_fd = s->out_fd = s->err_fd = -1;
        pthread_mutex_init(&s->lock, NULL);
        pthread_mutex_init(&s->write_lock, NULL);
        pthread_cond_init(&s->cond, &ca);
        m->n++;
    }
    pthread_condattr_destroy(&ca);
    for (int i = 0; i < m->n; i++) {
        if (pthread_create(&m->servers[i].thread, NULL, mcp_supervisor_main, &m->servers[i]) != 0) {
            omni_fail(err, errlen, OMNI_ERR_NOMEM, "mcp: cannot start a thread");
            goto fail;
        }
        m->servers[i].thread_started = true;
    }
    return m;
fail:
    mcp_free(m);
    return NULL;
}

void mcp_free(struct mcp *m)
{
    if (!m)
        return;
    atomic_store(&m->stopping, true);
    for (int i = 0; i < m->n; i++) {
        struct mcp_server *s = &m->servers[i];
        pthread_mutex_lock(&s->lock);
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
    }
    /* batches end quickly now: their requests see stopping */
    pthread_mutex_lock(&m->lock);
    while (m->batches > 0)
        pthread_cond_wait(&m->cond, &m->lock);
    pthread_mutex_unlock(&m->lock);
    for (int i = 0; i < m->n; i++) {
        struct mcp_server *s = &m->servers[i];
        if (s->thread_started)
            pthread_join(s->thread, NULL);
        if (s->spec->transport == MCP_STDIO)
            mcp_stdio_stop(s, NULL, 0);
        cJSON_Delete(s->tools);
        pthread_mutex_destroy(&s->lock);
        pthread_mutex_destroy(&s->write_lock);
        pthread_cond_destroy(&s->cond);
    }
    free(m->servers);
    struct mcp_config *c = calloc(1, sizeof *c);
    if (c) {
        *c = m->cfg;
        mcp_config_free(c);
    }
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cond);
    free(m);
}

bool mcp_wait_ready(struct mcp *m, double timeout_s)
{
    double until = mcp_now() + timeout_s;
    for (;;) {
        bool starting = false;
        for (int i = 0; i < m->n; i++) {
            pthread_mutex_lock(&m->servers[i].lock);
            starting |= m->servers[i].status == MCP_STARTING;
            pthread_mutex_unlock(&m->servers[i].lock);
        }
        if (!starting)
            return true;
        if (mcp_now() >= until)
            return false;
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

int mcp_n_servers(const struct mcp *m) { return m ? m->n : 0; }

static struct mcp_server *mcp_find(const struct mcp *m, const char *name)
{
    for (int i = 0; m && i < m->n; i++)
        if (!strcmp(m->servers[i].spec->name, name))
            return &m->servers[i];
    return NULL;
}

bool mcp_has_server(const struct mcp *m, const char *name) { return mcp_find(m, name) != NULL; }

// ---- listings and toolsets -----------------------------------------------------------------

struct mcp_tool {
    char *server, *name, *fname, *description;
    cJSON *schema;
};
struct mcp_toolset {
    struct mcp_tool *t;
    int n;
};

void mcp_toolset_free(struct mcp_toolset *ts)
{
    if (!ts)
        return;
    for (int i = 0; i < ts->n; i++) {
        free(ts->t[i].server);
        free(ts->t[i].name);
        free(ts->t[i].fname);
        free(ts->t[i].description);
        cJSON_Delete(ts->t[i].schema);
    }
    free(ts->t);
    free(ts);
}

/* Every server's tools now (connected servers only), with function names. */
static struct mcp_toolset *mcp_snapshot(struct mcp *m)
{
    struct mcp_toolset *ts = calloc(1, sizeof *ts);
    if (!ts)
        return NULL;
    int cap = 0;
    for (int i = 0; i < m->n; i++) {
        struct mcp_server *s = &m->servers[i];
        pthread_mutex_lock(&s->lock);
        const cJSON *t;
        if (s->status == MCP_CONNECTED)
            cJSON_ArrayForEach(t, s->tools) {
                if (ts->n == cap) {
                    cap = cap ? cap * 2 : 16;
                    struct mcp_tool *n = realloc(ts->t, (size_t)cap * sizeof *n);
                    if (!n)
                        break;
                    ts->t = n;
                }
                struct mcp_tool *x = &ts->t[ts->n++];
                const char *d = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "description"));
                const cJSON *sch = cJSON_GetObjectItemCaseSensitive(t, "inputSchema");
                *x = (struct mcp_tool){
                    .server = strdup(s->spec->name),
                    .name = strdup(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "name"))),
                    .description = d ? strdup(d) : NULL,
                    .schema = cJSON_IsObject(sch) ? cJSON_Duplicate(sch, true) : NULL,
                };
            }
        pthread_mutex_unlock(&s->lock);
    }
    for (int i = 0; i < ts->n; i++) {
        struct mcp_tool *x = &ts->t[i];
        bool dup = false;
        for (int k = 0; k < ts->n && !dup; k++)
            dup = k != i && x->name && ts->t[k].name && !strcmp(x->name, ts->t[k].name);
        if (!dup) {
            x->fname = x->name ? strdup(x->name) : NULL;
        } else if (x->server && x->name) {
            size_t len = strlen(x->server) + strlen(x->name) + 3;
            if ((x->fname = malloc(len)))
                snprintf(x->fname, len, "%s__%s", x->server, x->name);
        }
        if (!x->server || !x->name || !x->fname) {
            mcp_toolset_free(ts);
            return NULL;
        }
    }
    return ts;
}

struct mcp_toolset *mcp_toolset_get(struct mcp *m, const char *const *servers, int n, char *err,
                                    size_t errlen)
{
    for (int i = 0; i < n; i++)
        if (!mcp_find(m, servers[i])) {
            omni_fail(err, errlen, OMNI_ERR_NOTFOUND, "no MCP server '%.64s' (configured: %d)",
                      servers[i], m->n);
            return NULL;
        }
    struct mcp_toolset *ts = mcp_snapshot(m);
    if (!ts) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (servers) {   /* keep the named servers' tools (function names stay as in the full set) */
        int k = 0;
        for (int i = 0; i < ts->n; i++) {
            bool keep = false;
            for (int j = 0; j < n && !keep; j++)
                keep = !strcmp(ts->t[i].server, servers[j]);
            if (keep) {
                ts->t[k++] = ts->t[i];
            } else {
                free(ts->t[i].server);
                free(ts->t[i].name);
                free(ts->t[i].fname);
                free(ts->t[i].description);
                cJSON_Delete(ts->t[i].schema);
            }
        }
        ts->n = k;
    }
    return ts;
}

int mcp_toolset_count(const struct mcp_toolset *ts) { return ts ? ts->n : 0; }

static const struct mcp_tool *mcp_toolset_find(const struct mcp_toolset *ts, const char *fname)
{
    for (int i = 0; ts && fname && i < ts->n; i++)
        if (!strcmp(ts->t[i].fname, fname))
            return &ts->t[i];
    return NULL;
}

const char *mcp_toolset_server(const struct mcp_toolset *ts, const char *fname)
{
    const struct mcp_tool *t = mcp_toolset_find(ts, fname);
    return t ? t->server : NULL;
}

cJSON *mcp_toolset_openai(const struct mcp_toolset *ts)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; ts && i < ts->n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(o, "function");
        cJSON_AddStringToObject(f, "name", ts->t[i].fname);
        if (ts->t[i].description)
            cJSON_AddStringToObject(f, "description", ts->t[i].description);
        cJSON_AddItemToObject(f, "parameters", ts->t[i].schema
                                                   ? cJSON_Duplicate(ts->t[i].schema, true)
                                                   : cJSON_Parse("{\"type\":\"object\"}"));
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

cJSON *mcp_tools_json(struct mcp *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    struct mcp_toolset *ts = mcp_snapshot(m);
    for (int i = 0; ts && i < ts->n; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "server", ts->t[i].server);
        cJSON_AddStringToObject(t, "name", ts->t[i].name);
        cJSON_AddStringToObject(t, "function_name", ts->t[i].fname);
        if (ts->t[i].description)
            cJSON_AddStringToObject(t, "description", ts->t[i].description);
        else
            cJSON_AddNullToObject(t, "description");
        cJSON_AddItemToObject(t, "inputSchema", ts->t[i].schema
                                                    ? cJSON_Duplicate(ts->t[i].schema, true)
                                                    : cJSON_CreateNull());
        cJSON_AddItemToArray(data, t);
    }
    mcp_toolset_free(ts);
    return o;
}

cJSON *mcp_servers_json(struct mcp *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < m->n; i++) {
        struct mcp_server *s = &m->servers[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "name", s->spec->name);
        cJSON_AddStringToObject(x, "transport", s->spec->transport == MCP_STDIO ? "stdio" : "http");
        pthread_mutex_lock(&s->lock);
        cJSON_AddStringToObject(x, "status", mcp_status_names[s->status]);
        if (s->error[0])
            cJSON_AddStringToObject(x, "error", s->error);
        else
            cJSON_AddNullToObject(x, "error");
        cJSON_AddNumberToObject(x, "restarts", s->restarts);
        cJSON_AddNumberToObject(x, "tools", s->status == MCP_CONNECTED ? cJSON_GetArraySize(s->tools) : 0);
        if (s->info[0])
            cJSON_AddStringToObject(x, "server_info", s->info);
        else
            cJSON_AddNullToObject(x, "server_info");
        pthread_mutex_unlock(&s->lock);
        cJSON_AddItemToArray(data, x);
    }
    return o;
}

// ---- tool calls ---------------------------------------------------------------------------

struct mcp_job {
    struct mcp *m;
    char *name, *args;            /* the model's function name and arguments */
    char *server, *tool;          /* resolved, or NULL */
    struct mcp_result res;
    pthread_t th;
    bool started;
};

struct mcp_batch {
    struct mcp *m;
    struct mcp_job *jobs;
    int n;
    mcp_done_fn done;
    void *user;
    struct mcp_result *results;   /* [n], handed to done */
};

static void mcp_job_fail(struct mcp_job *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void mcp_job_fail(struct mcp_job *j, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(j->res.text);
    j->res.text = strdup(buf);
    j->res.is_error = true;
}

static void *mcp_job_main(void *arg)
{
    struct mcp_job *j = arg;
    struct mcp *m = j->m;
    double t0 = mcp_now();
    struct mcp_server *s = j->server ? mcp_find(m, j->server) : NULL;
    cJSON *args = NULL;
    if (!s) {
        mcp_job_fail(j, "error: there is no tool '%.100s'", j->name);
        goto out;
    }
    const char *a = j->args && *j->args ? j->args : "{}";
    args = cJSON_Parse(a);
    if (!cJSON_IsObject(args)) {
        mcp_job_fail(j, "error: the arguments of '%.100s' are not a JSON object: %.200s", j->name, a);
        goto out;
    }
    pthread_mutex_lock(&s->lock);
    enum mcp_status st = s->status;
    char why[320];
    snprintf(why, sizeof why, "%s", s->error);
    pthread_mutex_unlock(&s->lock);
    if (st != MCP_CONNECTED) {
        mcp_job_fail(j, "error: the MCP server '%s' is %s%s%.300s; the tool '%.100s' cannot run now",
                     j->server, st == MCP_STARTING ? "restarting" : "down",
                     why[0] ? " after: " : "", why, j->tool);
        goto out;
    }
    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "name", j->tool);
    cJSON_AddItemToObject(params, "arguments", args);
    args = NULL;
    cJSON *result = NULL;
    char err[320];
    int rc = mcp_request(s, "tools/call", params, m->p.tool_timeout_s, &result, err, sizeof err);
    cJSON_Delete(params);
    if (rc < 0) {
        mcp_job_fail(j, "error: the tool '%.100s' of MCP server '%s' failed: %s", j->tool,
                     j->server, err);
    } else {
        bool is_error = false;
        char *text = mcp_result_text(result, m->p.max_result_bytes, &is_error);
        if (!text) {
            mcp_job_fail(j, "error: out of memory");
        } else {
            free(j->res.text);
            j->res.text = text;
            j->res.is_error = is_error;
        }
    }
    cJSON_Delete(result);
out:
    cJSON_Delete(args);
    j->res.ms = (mcp_now() - t0) * 1e3;
    if (!j->res.text)
        mcp_job_fail(j, "error: out of memory");
    OMNI_INFO("mcp %s: %s %s in %.0f ms", j->server ? j->server : "-", j->tool ? j->tool : j->name,
              j->res.is_error ? "failed" : "ok", j->res.ms);
    return NULL;
}

static void mcp_batch_free(struct mcp_batch *b)
{
    for (int i = 0; i < b->n; i++) {
        struct mcp_job *j = &b->jobs[i];
        free(j->name);
        free(j->args);
        free(j->server);
        free(j->tool);
        free(j->res.text);
    }
    free(b->jobs);
    free(b->results);
    free(b);
}

static void *mcp_batch_main(void *arg)
{
    struct mcp_batch *b = arg;
    struct mcp *m = b->m;
    int width = m->p.max_calls > 0 ? m->p.max_calls : 1;
    for (int lo = 0; lo < b->n; lo += width) {
        int hi = lo + width < b->n ? lo + width : b->n;
        for (int i = lo; i < hi; i++)
            b->jobs[i].started = pthread_create(&b->jobs[i].th, NULL, mcp_job_main, &b->jobs[i]) == 0;
        for (int i = lo; i < hi; i++) {
            if (b->jobs[i].started)
                pthread_join(b->jobs[i].th, NULL);
            else
                mcp_job_main(&b->jobs[i]);   /* no thread: run it here */
        }
    }
    for (int i = 0; i < b->n; i++) {
        b->results[i] = b->jobs[i].res;
        b->results[i].server = b->jobs[i].server;
        b->results[i].tool = b->jobs[i].tool;
    }
    b->done(b->user, b->results, b->n);
    mcp_batch_free(b);
    pthread_mutex_lock(&m->lock);
    m->batches--;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

int mcp_call_batch(struct mcp *m, const struct mcp_toolset *ts, const struct mcp_call *calls,
                   int n, mcp_done_fn done, void *user, char *err, size_t errlen)
{
    struct mcp_batch *b = calloc(1, sizeof *b);
    if (!b || !(b->jobs = calloc((size_t)(n > 0 ? n : 1), sizeof *b->jobs)) ||
        !(b->results = calloc((size_t)(n > 0 ? n : 1), sizeof *b->results))) {
        if (b)
            free(b->jobs);
        free(b);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
    }
    b->m = m;
    b->n = n;
    b->done = done;
    b->user = user;
    for (int i = 0; i < n; i++) {
        struct mcp_job *j = &b->jobs[i];
        j->m = m;
        const struct mcp_tool *t = mcp_toolset_find(ts, calls[i].name);
        j->name = strdup(calls[i].name ? calls[i].name : "");
        j->args = strdup(calls[i].arguments ? calls[i].arguments : "");
        if (t) {
            j->server = strdup(t->server);
            j->tool = strdup(t->name);
        }
        if (!j->name || !j->args || (t && (!j->server || !j->tool))) {
            mcp_batch_free(b);
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
        }
    }
    pthread_mutex_lock(&m->lock);
    if (atomic_load(&m->stopping)) {
        pthread_mutex_unlock(&m->lock);
        mcp_batch_free(b);
        return omni_fail(err, errlen, OMNI_ERR_IO, "the server is shutting down");
    }
    m->batches++;
    pthread_mutex_unlock(&m->lock);
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &at, mcp_batch_main, b);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        pthread_mutex_lock(&m->lock);
        m->batches--;
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
        mcp_batch_free(b);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "cannot start a thread for the tool calls");
    }
    return 0;
}
