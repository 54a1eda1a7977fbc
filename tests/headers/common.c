/* Compiles alone: nvswap/common.h is self-contained. */
#include <nvswap/common.h>
#include <nvswap/common.h> /* and include-guarded */

int main(void)
{
	return 0;
}
