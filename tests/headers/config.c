/* Compiles alone: nvswap/config.h is self-contained. */
#include <nvswap/config.h>
#include <nvswap/config.h> /* and include-guarded */

int main(void)
{
	return 0;
}
