/* misuse: calls verbs of libibexverbs.so wrongly and checks that each
 * fails with the errno libibverbs gives, without crashing. Prints one
 * "ok NAME" or "FAIL NAME ..." line per check; exits 0 if all passed.
 * Built by TestMisuse with gcc against the verbs headers, run with the
 * library in LD_PRELOAD (it links against the real libibverbs). */
#include <infiniband/verbs.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;

static void on_alarm(int sig) { (void)sig; }

static void check(const char *name, int got, int want)
{
	if (got == want) {
		printf("ok %s\n", name);
	} else {
		printf("FAIL %s: got %d (%s), want %d (%s)\n", name, got, strerror(got), want, strerror(want));
		failed = 1;
	}
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n != 1) {
		printf("FAIL get_device_list: %d devices\n", n);
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) {
		printf("FAIL open_device: %s\n", strerror(errno));
		return 1;
	}
	struct ibv_port_attr pa;
	check("query_port 2", ibv_query_port(ctx, 2, &pa), EINVAL);
	check("query_port 1", ibv_query_port(ctx, 1, &pa), 0);
	union ibv_gid gid;
	check("query_gid 5", ibv_query_gid(ctx, 1, 5, &gid) ? EINVAL : 0, EINVAL);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[8192];
	errno = 0;
	check("reg_mr NULL", ibv_reg_mr(pd, NULL, 64, IBV_ACCESS_LOCAL_WRITE) ? 0 : errno, EINVAL);
	errno = 0;
	check("reg_mr remote write without local write", ibv_reg_mr(pd, buf, 64, IBV_ACCESS_REMOTE_WRITE) ? 0 : errno, EINVAL);
	errno = 0;
	check("reg_mr_iova2 iova != addr", ibv_reg_mr_iova2(pd, buf, 64, 0x1000, IBV_ACCESS_LOCAL_WRITE) ? 0 : errno, EINVAL);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	check("reg_mr", mr ? 0 : errno, 0);
	errno = 0;
	check("create_cq 0", ibv_create_cq(ctx, 0, NULL, NULL, 0) ? 0 : errno, EINVAL);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	errno = 0;
	check("create_qp UD", ibv_create_qp(pd, &ia) ? 0 : errno, EOPNOTSUPP);
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_inline_data = 1 << 20;
	errno = 0;
	check("create_qp inline 1 MiB", ibv_create_qp(pd, &ia) ? 0 : errno, EINVAL);
	ia.cap.max_inline_data = 0;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	check("create_qp RC", qp ? 0 : errno, 0);

	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad = NULL;
	check("post_send in RESET", ibv_post_send(qp, &swr, &bad), EINVAL);
	check("post_send bad_wr", bad == &swr ? 0 : 1, 0);
	struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *rbad = NULL;
	check("post_recv in RESET", ibv_post_recv(qp, &rwr, &rbad), EINVAL);

	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS};
	check("modify_qp RESET->RTS", ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	check("modify_qp INIT without PKEY_INDEX", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), EINVAL);
	check("modify_qp INIT with QKEY", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_QKEY), EINVAL);
	check("modify_qp INIT", ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX), 0);
	check("qp->state INIT", qp->state, IBV_QPS_INIT);

	sge.lkey = mr->lkey + 1;
	rbad = NULL;
	check("post_recv bad lkey", ibv_post_recv(qp, &rwr, &rbad), EINVAL);
	sge.lkey = mr->lkey;
	sge.length = sizeof(buf) + 1;
	check("post_recv past the MR", ibv_post_recv(qp, &rwr, &rbad), EINVAL);
	sge.length = 64;
	struct ibv_recv_wr rwr2 = {.wr_id = 3, .sg_list = &sge, .num_sge = -1};
	rwr.next = &rwr2;
	rbad = NULL;
	check("post_recv chain, second bad", ibv_post_recv(qp, &rwr, &rbad), EINVAL);
	check("post_recv chain bad_wr", rbad == &rwr2 ? 0 : 1, 0);
	rwr.next = NULL;

	struct ibv_wc wc[4];
	check("poll_cq empty", ibv_poll_cq(cq, 4, wc), 0);
	check("req_notify_cq without channel", ibv_req_notify_cq(cq, 0), EINVAL);
	check("destroy_cq in use", ibv_destroy_cq(cq), EBUSY);
	check("dealloc_pd in use", ibv_dealloc_pd(pd), EBUSY);
	check("destroy_qp", ibv_destroy_qp(qp), 0);
	/* One receive was posted; destroying the QP flushed nothing to poll
	 * into a CQ that outlives it? (ibex flushes on ERR only.) */
	check("destroy_cq", ibv_destroy_cq(cq), 0);
	check("dereg_mr", ibv_dereg_mr(mr), 0);
	check("close_device with a PD left", ibv_close_device(ctx), 0);

	/* perftest's signal(SIGALRM, ...) must get SA_ONSTACK: its handler
	 * can run while this thread is in Go code, on a goroutine's stack. */
	signal(SIGALRM, on_alarm);
	struct sigaction sa;
	sigaction(SIGALRM, NULL, &sa);
	check("signal sets SA_ONSTACK", !!(sa.sa_flags & SA_ONSTACK), 1);
	check("signal keeps the handler", sa.sa_handler == on_alarm, 1);
	return failed;
}
