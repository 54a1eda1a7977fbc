/* Compiles alone: nvswap/nvswap.h is self-contained. */
#include <nvswap/nvswap.h>
#include <nvswap/nvswap.h> /* and include-guarded */

int main(void)
{
	return 0;
}
