/* responses_store.c - a small LRU of stored responses: a doubly linked list,
 * most recent first, searched linearly. The count cap keeps the search
 * short (a thousand string compares is far below one request's cost) and
 * the byte cap keeps a few huge conversations from holding the memory. */
#include "src/api/responses_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct rs_entry {
    struct rs_entry *prev, *next;
    char *id, *response, *conversation, *items;
    size_t bytes;
};

struct responses_store {
    pthread_mutex_t lock;
    struct rs_entry *head, *tail;   /* {lock} head: most recently used */
    int count, max_entries;         /* {lock} count */
    size_t bytes, max_bytes;        /* {lock} bytes */
};

struct responses_store *responses_store_new(int max_entries, size_t max_bytes)
{
    struct responses_store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->max_entries = max_entries < 0 ? 0 : max_entries;
    s->max_bytes = max_bytes;
    return s;
}

static void rs_entry_free(struct rs_entry *e)
{
    free(e->id);
    free(e->response);
    free(e->conversation);
    free(e->items);
    free(e);
}

static void rs_unlink(struct responses_store *s, struct rs_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->tail = e->prev;
    e->prev = e->next = NULL;
    s->count--;
    s->bytes -= e->bytes;
}

static void rs_push_front(struct responses_store *s, struct rs_entry *e)
{
    e->prev = NULL;
    e->next = s->head;
    if (s->head)
        s->head->prev = e;
    s->head = e;
    if (!s->tail)
        s->tail = e;
    s->count++;
    s->bytes += e->bytes;
}

static struct rs_entry *rs_find(struct responses_store *s, const char *id)
{
    for (struct rs_entry *e = s->head; e; e = e->next)
        if (!strcmp(e->id, id))
            return e;
    return NULL;
}

void responses_store_free(struct responses_store *s)
{
    if (!s)
        return;
    for (struct rs_entry *e = s->head, *n; e; e = n) {
        n = e->next;
        rs_entry_free(e);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static char *rs_dup(const char *t, size_t *bytes)
{
    if (!t)
        t = "";
    size_t n = strlen(t) + 1;
    *bytes += n;
    char *d = malloc(n);
    if (d)
        memcpy(d, t, n);
    return d;
}

int responses_store_put(struct responses_store *s, const char *id, const char *response,
                        const char *conversation, const char *input_items)
{
    if (!s || !id || s->max_entries == 0)
        return -1;
    struct rs_entry *e = calloc(1, sizeof *e);
    if (!e)
        return -1;
    e->bytes = sizeof *e;
    e->id = rs_dup(id, &e->bytes);
    e->response = rs_dup(response, &e->bytes);
    e->conversation = rs_dup(conversation, &e->bytes);
    e->items = rs_dup(input_items, &e->bytes);
    if (!e->id || !e->response || !e->conversation || !e->items || e->bytes > s->max_bytes) {
        rs_entry_free(e);
        return -1;
    }
    pthread_mutex_lock(&s->lock);
    struct rs_entry *old = rs_find(s, id);
    if (old) {
        rs_unlink(s, old);
        rs_entry_free(old);
    }
    rs_push_front(s, e);
    while (s->count > s->max_entries || s->bytes > s->max_bytes) {
        struct rs_entry *victim = s->tail;
        rs_unlink(s, victim);
        rs_entry_free(victim);
    }
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int responses_store_get(struct responses_store *s, const char *id, char **response,
                        char **conversation, char **input_items)
{
    if (response)
        *response = NULL;
    if (conversation)
        *conversation = NULL;
    if (input_items)
        *input_items = NULL;
    if (!s || !id)
        return -1;
    pthread_mutex_lock(&s->lock);
    struct rs_entry *e = rs_find(s, id);
    int rc = -1;
    if (e) {
        rs_unlink(s, e);
        rs_push_front(s, e);
        size_t ignored = 0;
        rc = 0;
        if (response && !(*response = rs_dup(e->response, &ignored)))
            rc = -1;
        if (conversation && !(*conversation = rs_dup(e->conversation, &ignored)))
            rc = -1;
        if (input_items && !(*input_items = rs_dup(e->items, &ignored)))
            rc = -1;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc < 0) {
        if (response) {
            free(*response);
            *response = NULL;
        }
        if (conversation) {
            free(*conversation);
            *conversation = NULL;
        }
        if (input_items) {
            free(*input_items);
            *input_items = NULL;
        }
    }
    return rc;
}

bool responses_store_delete(struct responses_store *s, const char *id)
{
    if (!s || !id)
        return false;
    pthread_mutex_lock(&s->lock);
    struct rs_entry *e = rs_find(s, id);
    if (e)
        rs_unlink(s, e);
    pthread_mutex_unlock(&s->lock);
    if (e)
        rs_entry_free(e);
    return e != NULL;
}

int responses_store_count(struct responses_store *s)
{
    pthread_mutex_lock(&s->lock);
    int n = s->count;
    pthread_mutex_unlock(&s->lock);
    return n;
}

size_t responses_store_bytes(struct responses_store *s)
{
    pthread_mutex_lock(&s->lock);
    size_t n = s->bytes;
    pthread_mutex_unlock(&s->lock);
    return n;
}
