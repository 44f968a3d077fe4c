/* embeddings.h - the embedding and rerank routes over src/embed (the
 * service that batches inputs through the engine or the encoder batcher):
 *
 *   POST /v1/embeddings   OpenAI: input string | string[] | int[] | int[][],
 *                         encoding_format float|base64, dimensions, model
 *   POST /api/embed       Ollama: {model, input} -> {embeddings: [[...]]}
 *   POST /api/embeddings  Ollama (legacy): {model, prompt} -> {embedding}
 *   POST /embedding       llama.cpp: {content} -> [{index, embedding: [[...]]}]
 *   POST /v1/rerank, /rerank   Jina/Cohere: {query, documents, top_n,
 *                         return_documents} -> {results: [{index,
 *                         relevance_score, document?}]} sorted by score
 *
 * Each route parses and tokenizes on its ws worker, defers the response and
 * submits one embed job; the job's on_done (the service's delivery thread)
 * formats the answer. A client that leaves cancels its job.
 *
 * Thread safety: the routes run on ws workers; api_set_embed is called once
 * (any thread) when the models are loaded. */
#ifndef OMNI_API_EMBEDDINGS_H
#define OMNI_API_EMBEDDINGS_H

struct api;
struct ws_req;
struct cJSON;

void embeddings_route(struct api *a, struct ws_req *r, const char *arg);        /* OpenAI */
void embeddings_ollama_route(struct api *a, struct ws_req *r, const char *arg); /* /api/embed */
void embeddings_ollama_legacy_route(struct api *a, struct ws_req *r, const char *arg);
void embeddings_llamacpp_route(struct api *a, struct ws_req *r, const char *arg); /* /embedding */
void rerank_route(struct api *a, struct ws_req *r, const char *arg);

/* The embedding and rerank models as /v1/models entries appended to data
 * (those not named skip; skip may be NULL). */
void embeddings_list_models(struct api *a, struct cJSON *data, const char *skip);
/* Is name one of the embedding or rerank models? */
int embeddings_has_model(struct api *a, const char *name);

#endif
