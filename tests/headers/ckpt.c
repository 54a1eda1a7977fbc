/* Compiles alone: nvswap/ckpt.h is self-contained. */
#include <nvswap/ckpt.h>
#include <nvswap/ckpt.h> /* and include-guarded */

int main(void)
{
	return 0;
}
